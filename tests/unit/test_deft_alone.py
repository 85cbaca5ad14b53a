"""DEFT with one worker (gradsync/compressors/deft_alone.py): on a GPU's route (run here on the
CPU) the same index set as the host rule's layer-wise top-k, in a length the host knows
beforehand, with no collective and no host read; on a CPU's own route, exactly that set."""

from __future__ import annotations

import pytest
import torch

from benchmarks.op_counts import count
from gradsync.algorithms.deft_plan import assign_local_k, local_k_bound, partition_layers
from gradsync.comm.solo import SoloCollective
from gradsync.compressors.code_paths import gpu_branches
from gradsync.compressors.deft import DEFTCompressor
from gradsync.compressors.deft_alone import _OnDevice, lone_selection
from gradsync.compressors.deft_local_k import selection_runs
from gradsync.compressors.index_ranges import spread_ranges
from gradsync.compressors.selection import layerwise_topk_indices, range_norms
from gradsync.types import GroupInfo

SIZES = [300, 20, 500, 7, 173, 1, 64]


def _grad(seed: int, sizes: list[int] = SIZES) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    # Layers of different scales, as real ones are, and one all zero.
    scales = [10.0 ** (i % 3 - 1) if i != 3 else 0.0 for i in range(len(sizes))]
    return torch.cat(
        [torch.randn(n, generator=gen) * s for n, s in zip(sizes, scales, strict=True)]
    )


def _host_selection(grad: torch.Tensor, density: float, exact: bool) -> tuple[torch.Tensor, int]:
    """The one-worker definition: the host rule's k's from the layers' norms, then each layer's
    own top k_j (the indices, and how many k's in all)."""
    ranges = partition_layers(SIZES, 1)
    lengths = [e - s for s, e in ranges]
    k = max(1, int(density * grad.numel()))
    ks = assign_local_k(range_norms(grad, ranges), lengths, k, exact=exact)
    return layerwise_topk_indices(grad, ranges, ks), sum(ks)


def _same_set(grad: torch.Tensor, chosen: torch.Tensor, expected: torch.Tensor) -> bool:
    """The same index set up to ties: the same indices wherever magnitudes differ, and in
    every layer the same magnitudes (the zero layer's picks are any of its zeros)."""
    distinct = torch.unique(chosen)
    if distinct.numel() != expected.numel():
        return False
    for start, end in partition_layers(SIZES, 1):
        mine, theirs = (i[(i >= start) & (i < end)] for i in (distinct, expected))
        if not torch.equal(grad[mine].abs().sort().values, grad[theirs].abs().sort().values):
            return False
    return True


def _agreed(compressor: DEFTCompressor, grad: torch.Tensor) -> torch.Tensor:
    payload, ctx = compressor.compress(grad, group=GroupInfo.of_sizes("g", 0, SIZES))
    return compressor.selected(payload, ctx)


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("density", [0.002, 0.05, 0.3, 0.9])
def test_a_gpus_route_selects_the_host_rules_set_in_a_length_known_beforehand(density, exact):
    # 0.002: fewer elements than layers; 0.9: most layers capped at their size.
    k = max(1, int(density * sum(SIZES)))
    bound = local_k_bound(SIZES, k, exact=exact)
    for seed in range(4):
        grad = _grad(seed)
        expected, picked = _host_selection(grad, density, exact)
        with gpu_branches():
            chosen = _agreed(DEFTCompressor(density=density, exact_k=exact), grad)
        assert chosen.numel() == bound >= picked
        # Every slot past the k's repeats an index already selected.
        assert _same_set(grad, chosen, expected)


def test_exact_k_covering_every_layer_fills_its_length_without_a_copy():
    grad = _grad(0)
    with gpu_branches():
        chosen = _agreed(DEFTCompressor(density=0.05, exact_k=True), grad)
    assert chosen.numel() == int(0.05 * grad.numel()) == torch.unique(chosen).numel()


@pytest.mark.parametrize("exact", [False, True])
def test_a_cpus_own_route_selects_exactly_the_host_rules_set(exact):
    for seed in range(3):
        grad = _grad(seed)
        expected, picked = _host_selection(grad, 0.05, exact)
        chosen = _agreed(DEFTCompressor(density=0.05, exact_k=exact), grad)
        assert chosen.numel() == picked and _same_set(grad, chosen, expected)


class _Alone(SoloCollective):
    """A world of one in which any collective is a mistake: a lone worker has nobody to agree
    with."""

    def broadcast(self, payload, *, src):
        raise AssertionError("a lone DEFT worker broadcast")

    def all_gather(self, payload, *, same_shape=False):
        raise AssertionError("a lone DEFT worker gathered")


@pytest.mark.parametrize("exact", [False, True])
def test_a_lone_worker_exchanges_nothing_and_on_a_gpus_route_reads_nothing(exact):
    grad = _grad(1)
    compressor = DEFTCompressor(density=0.05, exact_k=exact)
    compressor.bind(_Alone())
    group = GroupInfo.of_sizes("g", 0, SIZES)
    compressor.compress(grad, group=group)  # a CPU's route
    with gpu_branches():
        compressor.compress(grad, group=group)  # layouts made once
        counts = count(lambda: compressor.decompress(*compressor.compress(grad, group=group)))
    assert dict(counts.syncs) == {}


def test_the_runs_put_each_layers_picks_at_its_places_after_a_padding_of_copies():
    first, ks, total = [0, 10, 30, 31], [3, 0, 1, 2], 9
    lengths, shifts, floor = selection_runs(ks, first, total)
    places = spread_ranges(torch.tensor(shifts), torch.tensor(lengths), total)
    # Three copies of the lowest pick, then layer 0's three, layer 2's one, layer 3's two.
    assert places.clamp(min=floor).tolist() == [0, 0, 0, 0, 1, 2, 30, 31, 32]


def test_runs_past_the_slots_are_cut():
    lengths, shifts, floor = selection_runs([4, 4], [0, 10], 6)
    assert lengths == [0, 4, 2] and floor == 0
    places = spread_ranges(torch.tensor(shifts), torch.tensor(lengths), 6)
    assert places.tolist() == [0, 1, 2, 3, 10, 11]


def test_the_layers_norms_are_range_norms_bit_for_bit():
    # Rows of 1024 that lie inside a layer, rows that cross a boundary, a last partial row.
    sizes = (3000, 1, 5000, 17, 2048, 700, 1024)
    flat = torch.randn(sum(sizes), generator=torch.Generator().manual_seed(3)) * 1e-3
    on_device = _OnDevice(lone_selection(sizes, 100, False, flat.device), flat.device)
    squares = on_device._sums_of_squares(flat)[: len(sizes)]
    ranges = partition_layers(list(sizes), 1)
    assert squares.sqrt().float().tolist() == range_norms(flat, ranges)
