"""The batched layer-wise top-k (``gradsync/compressors/layer_topk.py``) selects what one
``torch.topk`` per layer selects (``layerwise_topk_indices``), on magnitudes that are all
distinct, with a handful of ``torch.topk`` calls however many layers there are. These layouts are
small, which a CPU would select one layer at a time (``CPU_LOOP_BELOW``): the batched classes,
the GPU's path, are forced here, and the CPU's loop is checked against them."""

from __future__ import annotations

import random

import pytest
import torch

from gradsync.compressors import layer_topk
from gradsync.compressors.layer_topk import FILL, K_SHARE, SMALL, LayerwiseTopK, size_classes
from gradsync.compressors.selection import (
    layerwise_topk_indices,
    per_tensor_topk_indices,
    tensor_ranges,
)
from gradsync.compressors.sparse import density_k

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def batched_classes(monkeypatch):
    monkeypatch.setattr(layer_topk, "CPU_LOOP_BELOW", 0)


def _distinct(numel: int, seed: int) -> torch.Tensor:
    """Distinct magnitudes (a permutation of 1..numel, scaled), with random signs."""
    gen = torch.Generator().manual_seed(seed)
    magnitudes = torch.randperm(numel, generator=gen).float().add_(1) / numel
    signs = torch.randint(0, 2, (numel,), generator=gen).float().mul_(2).sub_(1)
    return magnitudes * signs


def _batched(flat, sizes, layers, ks) -> torch.Tensor:
    ranges = tensor_ranges(sizes)
    starts = [ranges[j][0] for j in layers]
    plan = LayerwiseTopK(starts, [sizes[j] for j in layers], ks, numel=flat.numel(), device=CPU)
    chosen = plan.indices(flat)
    assert chosen.numel() == plan.total
    return chosen


def _reference(flat, sizes, layers, ks) -> torch.Tensor:
    ranges = tensor_ranges(sizes)
    return layerwise_topk_indices(flat, [ranges[j] for j in layers], ks)


@pytest.mark.parametrize("seed", range(40))
def test_batched_selection_equals_one_topk_per_layer(seed):
    rng = random.Random(seed)
    sizes = [
        rng.choice([1, 2, 5, 64, 300, 513, 1000, 2100, 4096]) for _ in range(rng.randint(1, 14))
    ]
    flat = _distinct(sum(sizes), seed)
    layers = [j for j in range(len(sizes)) if rng.random() < 0.75]  # a worker's bin
    ks = [rng.randint(0, sizes[j]) for j in layers]  # 0 (nothing) up to the whole layer
    chosen = _batched(flat, sizes, layers, ks)
    assert torch.equal(
        torch.sort(chosen).values, torch.sort(_reference(flat, sizes, layers, ks)).values
    )


@pytest.mark.parametrize("seed", range(5))
def test_small_layouts_on_a_cpu_select_the_same_as_the_batched_classes(monkeypatch, seed):
    sizes = [300, 5, 2100, 64, 1000, 1]
    flat = _distinct(sum(sizes), seed)
    layers, ks = [0, 2, 3, 4, 5], [30, 21, 0, 64, 1]
    batched = _batched(flat, sizes, layers, ks)
    calls = []
    topk = torch.topk
    monkeypatch.setattr(torch, "topk", lambda *a, **k: calls.append(1) or topk(*a, **k))
    monkeypatch.setattr(layer_topk, "CPU_LOOP_BELOW", sum(sizes) + 1)
    looped = _batched(flat, sizes, layers, ks)
    assert len(calls) == 0  # Tensor.topk, one per layer that wants any, not the classes' calls
    assert torch.equal(torch.sort(looped).values, torch.sort(batched).values)


def test_layers_at_the_end_of_the_tensor_are_read_from_windows_that_end_there():
    # The last layers are shorter than their class's width: a window starting at them would run
    # past the end, so it ends where they end and their columns are at its right.
    sizes = [700, 650, 400, 380]
    flat = _distinct(sum(sizes), 7)
    ks = [30, 1, 17, 5]
    chosen = _batched(flat, sizes, [0, 1, 2, 3], ks)
    want = _reference(flat, sizes, [0, 1, 2, 3], ks)
    assert torch.equal(torch.sort(chosen).values, torch.sort(want).values)


def test_per_tensor_topk_equals_the_definition():
    sizes = [300, 20, 500, 7, 173, 2048, 2048, 1]
    flat = _distinct(sum(sizes), 3)
    ranges = tensor_ranges(sizes)
    want = layerwise_topk_indices(flat, ranges, [density_k(0.05, n) for n in sizes])
    chosen = per_tensor_topk_indices(flat, sizes, 0.05)
    assert torch.equal(torch.sort(chosen).values, torch.sort(want).values)


def test_size_classes_pad_little_and_cover_every_layer_once():
    lengths = [2_359_296, 2_359_296, 1_179_648, 589_824, 294_912, 147_456, 8192, 5120, 512, 64, 10]
    ks = [20_000, 16_000, 9_000, 5000, 3000, 1000, 80, 50, 5, 1, 1]
    classes = size_classes(lengths, ks)
    assert sorted(j for members in classes for j in members) == list(range(len(lengths)))
    for members in classes:
        width, k = max(lengths[j] for j in members), max(ks[j] for j in members)
        assert width <= SMALL or all(lengths[j] >= FILL * width for j in members)
        assert width <= SMALL or all(ks[j] >= K_SHARE * k for j in members)
    assert len(classes) == 8  # the two 2.36M together, the small ones together
    assert len(size_classes(lengths[:2], [20_000, 9000])) == 2  # k too far apart


def test_topk_calls_do_not_grow_with_the_number_of_layers(monkeypatch):
    calls = []
    topk = torch.topk
    monkeypatch.setattr(torch, "topk", lambda *a, **k: calls.append(1) or topk(*a, **k))
    for layers in (8, 120):
        calls.clear()
        sizes = [3000 + 3 * j for j in range(layers)]  # one class
        flat = _distinct(sum(sizes), layers)
        ks = [12 + j % 4 for j in range(layers)]
        chosen = _batched(flat, sizes, list(range(layers)), ks)
        assert len(calls) == 1, layers
        want = _reference(flat, sizes, list(range(layers)), ks)
        assert torch.equal(torch.sort(chosen).values, torch.sort(want).values)
