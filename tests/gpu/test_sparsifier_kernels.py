"""The segmented top-k and random-k's draws on a GPU (``segmented_topk.py``, ``randomk.py``):
their compiled kernels select what the per-tensor loop selects, and after a warm-up call
neither makes the host wait (``torch.cuda``'s sync debug mode raises at any synchronizing
call)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

from gradsync.compressors.randomk import random_subset
from gradsync.compressors.seeding import seeded_generator
from gradsync.compressors.segmented_topk import SegmentedTopK, density_topk
from gradsync.compressors.selection import layerwise_topk_indices, tensor_ranges
from gradsync.compressors.sparse import density_k

pytestmark = pytest.mark.gpu

SIZES = [9408, 64, 64] + [36_864, 64, 64] * 4 + [73_728, 128, 128, 147_456, 8192, 128, 128]
SIZES += [589_824, 256, 256, 2_359_296, 512, 512, 512_000, 1000]
"""A ResNet-like mix: large convolutions, batch-norm pairs, a classifier."""


@contextmanager
def _no_host_sync() -> Iterator[None]:
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _distinct(numel: int, device: torch.device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    magnitudes = torch.randperm(numel, generator=gen).float().add_(1) / numel
    signs = torch.randint(0, 2, (numel,), generator=gen).float().mul_(2).sub_(1)
    return (magnitudes * signs).to(device)


@pytest.mark.parametrize("density", [0.001, 0.01, 0.25])
def test_segmented_topk_on_a_gpu_selects_each_tensors_top_k_without_waiting(density):
    device = torch.device("cuda")
    flat = _distinct(sum(SIZES), device)
    ranges = tensor_ranges(SIZES)
    ks = [density_k(density, n) for n in SIZES]
    fixed = density_topk(tuple(SIZES), density, device)
    plan = SegmentedTopK([s for s, _ in ranges], SIZES, ks, numel=flat.numel(), device=device)
    k_tensor = torch.tensor(ks, device=device)
    fixed.indices(flat), plan.indices(flat, k_tensor, sum(ks))  # compiles
    with _no_host_sync():
        chosen = fixed.indices(flat)
        from_device_ks = plan.indices(flat, k_tensor, sum(ks))
    want = layerwise_topk_indices(flat, ranges, ks).sort().values
    assert torch.equal(chosen.sort().values, want)
    assert torch.equal(from_device_ks.sort().values, want)


def test_random_k_draws_on_a_gpu_without_waiting():
    device = torch.device("cuda")
    n, k = 25_557_032, 25_557
    random_subset(n, k, seeded_generator(0, 0, "all", device=device))  # warm-up
    with _no_host_sync():
        picks = [random_subset(n, k, seeded_generator(0, 1, "all", device=device)) for _ in "ab"]
    assert torch.equal(picks[0], picks[1])  # one seed, one draw
    assert picks[0].unique().numel() == k
    assert int(picks[0].min()) >= 0 and int(picks[0].max()) < n
