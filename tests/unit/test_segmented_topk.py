"""The segmented top-k (``gradsync/compressors/segmented_topk.py``) selects what one ``torch.topk``
per segment selects (``layerwise_topk_indices``), exactly ``total`` indices, in a number of
operations that does not depend on the layout, with no host synchronization.

Row widths are powers of two from 1024 up, so a layout this small would be sorted whole: the
tests try narrower widths too (``WIDTHS``) and several costs of a sort (``SORT_COST``), so that
rows, short segments and padded last rows all occur."""

from __future__ import annotations

import random

import pytest
import torch

from benchmarks.op_counts import count
from gradsync.compressors import segmented_topk
from gradsync.compressors.code_paths import gpu_branches
from gradsync.compressors.segmented_topk import (
    FixedTopK,
    SegmentedTopK,
    choose_width,
    density_topk,
)
from gradsync.compressors.selection import layerwise_topk_indices, tensor_ranges
from gradsync.compressors.sparse import density_k

CPU = torch.device("cpu")
NARROW = tuple(1 << p for p in range(1, 12))


def _narrow(monkeypatch, sort_cost: float) -> None:
    monkeypatch.setattr(segmented_topk, "WIDTHS", NARROW)
    monkeypatch.setattr(segmented_topk, "SORT_COST", sort_cost)


def _values(numel: int, seed: int, ties: bool, dtype: torch.dtype) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(numel, generator=gen, dtype=torch.float64)
    if ties:  # a few magnitudes, each many times, both signs
        x = x.mul(2).round()
    return x.to(dtype)


def _layout(rng: random.Random) -> list[int]:
    kind = rng.choice(["tiny", "huge", "mixed"])
    if kind == "tiny":
        return [rng.randint(0, 6) for _ in range(rng.randint(1, 60))]
    if kind == "huge":
        return [rng.randint(1, 4)] * rng.randint(0, 3) + [rng.randint(3000, 9000)]
    return [rng.choice([0, 1, 2, 5, 64, 300, 513, 1000, 2100, 4096]) for _ in range(12)]


def _assert_top_k(flat, chosen, ranges, ks) -> None:
    """``chosen`` holds, range after range, ``ks[j]`` distinct indices of range j whose
    magnitudes are range j's largest (``torch.topk``'s, ties aside)."""
    assert chosen.dtype == torch.int64 and chosen.numel() == sum(ks)
    want = layerwise_topk_indices(flat, ranges, ks)
    place = 0
    for (start, end), k in zip(ranges, ks, strict=True):
        got, expected = chosen[place : place + k], want[place : place + k]
        place += k
        assert got.unique().numel() == k
        assert bool(((got >= start) & (got < end)).all())
        magnitudes = flat[got].abs().double().sort().values
        assert torch.equal(magnitudes, flat[expected].abs().double().sort().values)


@pytest.mark.parametrize("seed", range(60))
def test_each_segment_gets_its_own_top_k(monkeypatch, seed):
    rng = random.Random(seed)
    _narrow(monkeypatch, rng.choice([0.5, 3, 6, 40]))
    sizes = _layout(rng)
    numel = sum(sizes)
    if numel == 0:
        sizes, numel = [*sizes, 1], numel + 1
    dtype = rng.choice([torch.float32, torch.float32, torch.float16, torch.bfloat16, torch.float64])
    flat = _values(numel, seed, ties=rng.random() < 0.3, dtype=dtype)
    ranges = tensor_ranges(sizes)
    picked = [j for j in range(len(sizes)) if rng.random() < 0.8]  # a worker's own segments
    ranges = [ranges[j] for j in picked]
    lengths = [end - start for start, end in ranges]
    caps = [min(n, rng.choice([n, n, 1, rng.randint(0, n)])) for n in lengths]  # k = n, 1, ...
    ks = [rng.randint(0, cap) for cap in caps]
    plan = SegmentedTopK([s for s, _ in ranges], lengths, caps, numel=numel, device=CPU)
    chosen = plan.indices(flat, torch.tensor(ks, dtype=torch.int64), sum(ks))
    _assert_top_k(flat, chosen, ranges, ks)


def test_segments_in_any_order_come_out_in_theirs(monkeypatch):
    _narrow(monkeypatch, 6)
    flat = _values(5000, 1, ties=False, dtype=torch.float32)
    ranges = [(3000, 5000), (0, 7), (7, 2900)]  # not in the flat tensor's order; a gap
    ks = [40, 3, 100]
    plan = SegmentedTopK(
        [s for s, _ in ranges], [e - s for s, e in ranges], ks, numel=5000, device=CPU
    )
    assert plan.width > 0  # rows are used
    _assert_top_k(
        flat, plan.indices(flat, torch.tensor(ks, dtype=torch.int64), sum(ks)), ranges, ks
    )


def test_k_below_the_caps_and_zero_are_taken_as_asked(monkeypatch):
    _narrow(monkeypatch, 6)
    sizes = [4096, 3, 2000, 600]
    flat = _values(sum(sizes), 2, ties=False, dtype=torch.float32)
    plan = SegmentedTopK(
        [0, 4096, 4099, 6099], sizes, [300, 3, 300, 300], numel=sum(sizes), device=CPU
    )
    ranges = tensor_ranges(sizes)
    for ks in ([300, 3, 300, 300], [0, 0, 0, 0], [1, 0, 299, 17]):
        _assert_top_k(
            flat, plan.indices(flat, torch.tensor(ks, dtype=torch.int64), sum(ks)), ranges, ks
        )


@pytest.mark.parametrize("sort_cost", [0.5, 6])
def test_the_gpus_route_selects_as_the_cpus(monkeypatch, sort_cost):
    _narrow(monkeypatch, sort_cost)
    sizes = [2100, 5, 64, 4096, 1, 300, 1000]
    flat = _values(sum(sizes), 3, ties=False, dtype=torch.float32)
    ranges = tensor_ranges(sizes)
    ks = [density_k(0.05, n) for n in sizes]
    eager = FixedTopK([s for s, _ in ranges], sizes, ks, numel=flat.numel(), device=CPU)
    with gpu_branches():  # the fused kernel compiled, the segmented selection on a CPU
        compiled = FixedTopK([s for s, _ in ranges], sizes, ks, numel=flat.numel(), device=CPU)
        chosen = compiled.indices(flat)
    _assert_top_k(flat, chosen, ranges, ks)
    # On a CPU, FixedTopK selects with LayerwiseTopK: the same set (magnitudes all distinct).
    assert torch.equal(chosen.sort().values, eager.indices(flat).sort().values)


def test_operations_do_not_depend_on_the_layout_and_nothing_waits_on_the_host(monkeypatch):
    _narrow(monkeypatch, 6)
    # Several segments each (``repeat_interleave`` takes another route for one).
    layouts = [[2100, 5, 64, 4096, 1, 300], [7] * 90 + [9000], [3000, 3], [1, 2, 3]]
    counted = []
    with gpu_branches():
        for sizes in layouts:
            flat = _values(sum(sizes), 4, ties=False, dtype=torch.float32)
            fixed = density_topk(tuple(sizes), 0.01, CPU)
            ranges = tensor_ranges(sizes)
            plan = SegmentedTopK([s for s, _ in ranges], sizes, sizes, numel=sum(sizes), device=CPU)
            ks = torch.tensor([density_k(0.01, n) for n in sizes])
            total = int(ks.sum())

            def both(fixed=fixed, plan=plan, flat=flat, ks=ks, total=total) -> None:
                fixed.indices(flat)
                plan.indices(flat, ks, total)

            both()  # compiles
            counted.append(count(both))
    assert all(not c.syncs for c in counted), [dict(c.syncs) for c in counted]
    assert len({c.operations for c in counted}) == 1, [sorted(c.by_op.items()) for c in counted]


def test_rows_sort_a_small_share_of_resnet_sized_layers():
    # ResNet-18's largest tensors and a few small ones, at DGC's density.
    lengths = [2_359_296] * 3 + [1_179_648, 589_824, 147_456, 36_864, 9408] + [64, 128, 512] * 10
    caps = [density_k(0.001, n) for n in lengths]
    width = choose_width(lengths, caps)
    plan = SegmentedTopK([0] * len(lengths), lengths, caps, numel=max(lengths), device=CPU)
    assert width >= 8 * max(caps) and plan.candidates < 0.1 * sum(lengths)
    # Every element wanted: rows would keep all of it, so everything is sorted.
    assert choose_width(lengths, lengths) == 0


def test_a_segment_outside_the_flat_tensor_is_refused():
    with pytest.raises(ValueError, match="outside"):
        SegmentedTopK([5], [10], [1], numel=12, device=CPU)
