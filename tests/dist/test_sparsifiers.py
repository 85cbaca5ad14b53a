"""Sparsifiers over real gloo process groups, against what docs/methods/compressors/ says of
them: deft.md ("What the tests check"), cltk.md, topk.md and threshold.md ("How it works").

Each world runs several compressors on rank-specific gradients and returns everything a
reference needs (compensated gradients, index sets, averaged outputs, residuals, bytes); the
tests recompute the expected results from the definitions.
"""

from __future__ import annotations

import pytest
import torch

from gradsync.algorithms.deft_plan import (
    assign_local_k,
    bin_for_rank,
    decision_worker,
    lpt_bins,
    partition_layers,
)
from gradsync.comm.collective import TorchCollective
from gradsync.compressors.cltk import CLTKCompressor
from gradsync.compressors.deft import DEFTCompressor
from gradsync.compressors.selection import range_norms
from gradsync.compressors.threshold import ThresholdCompressor
from gradsync.compressors.topk import TopKCompressor
from gradsync.feedback.residual import ResidualFeedback
from gradsync.types import GroupInfo
from tests.helpers.dist import run_world

pytestmark = pytest.mark.dist

SIZES = [400, 30, 900, 11, 250, 5]
DENSITY = 0.02
FACTORIES = {
    "topk-union": lambda: TopKCompressor(density=DENSITY),
    "topk-allgather": lambda: TopKCompressor(density=DENSITY, exchange="allgather"),
    "threshold-union": lambda: ThresholdCompressor(density=DENSITY, threshold=1.5),
    "cltk": lambda: CLTKCompressor(density=DENSITY),
    "deft": lambda: DEFTCompressor(density=DENSITY),
    "deft-exact": lambda: DEFTCompressor(density=DENSITY, exact_k=True),
}


def _gradient(rank: int, step: int, sizes: list[int], identical: bool) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 * step + (0 if identical else rank))
    scales = torch.cat([torch.full((n,), 0.5 + i) for i, n in enumerate(sizes)])
    return torch.randn(sum(sizes), generator=gen) * scales


def _run(
    rank: int,
    world_size: int,
    names: list[str],
    steps: int,
    sizes: list[int],
    identical: bool = False,
) -> dict:
    collective = TorchCollective()
    results: dict[str, list[dict]] = {}
    for name in names:
        compressor, feedback = FACTORIES[name](), ResidualFeedback()
        compressor.bind(collective)
        collective.take_bytes()
        records = []
        for step in range(steps):
            compensated = feedback.compensate(_gradient(rank, step, sizes, identical), name="g")
            group = GroupInfo.of_sizes("g", step, sizes)
            payload, ctx = compressor.compress(compensated, group=group)
            transmitted = compressor.decompress(payload, ctx)
            feedback.update(compensated, transmitted, name="g")
            own = compressor.selected(payload, ctx)
            if compressor.allreducible:
                out = compressor.decompress(collective.all_reduce(payload), ctx)
            else:
                out = sum(compressor.decompress(p, ctx) for p in collective.all_gather(payload))
            records.append(
                {
                    "compensated": compensated,
                    "transmitted": transmitted,
                    "selected": own,
                    "out": out / world_size,
                    "residual": feedback.state_dict()["g"],
                    "bytes": collective.take_bytes().payload,
                }
            )
        results[name] = records
    return results


@pytest.fixture(scope="module")
def three_workers(tmp_path_factory):
    names = ["topk-union", "topk-allgather", "threshold-union", "cltk"]
    return run_world(_run, 3, tmp_path_factory.mktemp("three"), names, 4, SIZES)


@pytest.fixture(scope="module")
def four_workers(tmp_path_factory):
    return run_world(_run, 4, tmp_path_factory.mktemp("four"), ["deft", "deft-exact"], 4, SIZES)


def _topk_set(values: torch.Tensor, k: int) -> set[int]:
    return set(torch.topk(values.abs(), k).indices.tolist())


def _scatter_mean(per_worker: list[tuple[torch.Tensor, torch.Tensor]], numel: int) -> torch.Tensor:
    out = torch.zeros(numel)
    for values, indices in per_worker:
        out[indices] += values
    return out / len(per_worker)


def test_union_topk_sends_every_worker_values_on_the_union(three_workers):
    numel, k = sum(SIZES), int(DENSITY * sum(SIZES))
    for step in range(4):
        records = [r["topk-union"][step] for r in three_workers]
        union = set().union(*(_topk_set(r["compensated"], k) for r in records))
        mean = sum(r["compensated"] for r in records) / 3
        for r in records:
            assert set(r["selected"].tolist()) == union
            chosen = torch.tensor(sorted(union))
            torch.testing.assert_close(r["out"][chosen], mean[chosen])
            assert torch.count_nonzero(r["out"]) <= len(union)
            # memory is cleared on the whole union, not only on the worker's own picks
            assert torch.count_nonzero(r["residual"][chosen]) == 0
            rest = torch.ones(numel, dtype=torch.bool)
            rest[chosen] = False
            assert torch.equal(r["residual"][rest], r["compensated"][rest])
            # indices as int32 (every worker has k: no lengths go first), then values at the union
            assert r["bytes"] == 4 * k + 4 * len(union)
        assert k <= len(union) <= 3 * k


def test_union_topk_with_identical_gradients_has_no_build_up(tmp_path):
    k = int(DENSITY * sum(SIZES))
    results = run_world(_run, 2, tmp_path, ["topk-union"], 1, SIZES, True)
    assert [r["topk-union"][0]["selected"].numel() for r in results] == [k, k]


def test_allgather_topk_averages_each_workers_own_selection(three_workers):
    numel, k = sum(SIZES), int(DENSITY * sum(SIZES))
    for step in range(4):
        records = [r["topk-allgather"][step] for r in three_workers]
        picks = [torch.topk(r["compensated"].abs(), k).indices for r in records]
        expected = _scatter_mean(
            [(r["compensated"][p], p) for r, p in zip(records, picks, strict=True)], numel
        )
        for r, own in zip(records, picks, strict=True):
            torch.testing.assert_close(r["out"], expected)
            assert set(r["selected"].tolist()) == set(own.tolist())
            # memory is cleared only where this worker selected
            assert torch.count_nonzero(r["residual"][own]) == 0
            assert torch.equal(r["residual"] + r["transmitted"], r["compensated"])


def test_threshold_union_is_the_union_of_every_worker_above_threshold(three_workers):
    for step in range(4):
        records = [r["threshold-union"][step] for r in three_workers]
        above = [
            set(torch.nonzero(r["compensated"].abs() >= 1.5).reshape(-1).tolist()) for r in records
        ]
        for r in records:
            assert set(r["selected"].tolist()) == set().union(*above)


def test_cltk_uses_the_rotating_leaders_topk_everywhere(three_workers):
    k = int(DENSITY * sum(SIZES))
    for step in range(4):
        records = [r["cltk"][step] for r in three_workers]
        leader = records[step % 3]
        expected = _topk_set(leader["compensated"], k)
        mean = sum(r["compensated"] for r in records) / 3
        for rank, r in enumerate(records):
            assert r["selected"].numel() == k  # density is exactly the setup density
            assert set(r["selected"].tolist()) == expected
            torch.testing.assert_close(r["out"][r["selected"]], mean[r["selected"]])
            broadcast = 4 * k if rank == step % 3 else 0  # only the leader sends indices
            assert r["bytes"] == broadcast + 4 * k


@pytest.mark.parametrize("name", ["deft", "deft-exact"])
def test_deft_indices_are_disjoint_and_density_stays_at_the_setup(four_workers, name):
    k = int(DENSITY * sum(SIZES))
    num_layers = len(partition_layers(SIZES, 4))
    for step in range(4):
        records = [r[name][step] for r in four_workers]
        selected = records[0]["selected"]
        # Disjoint selections, so no index appears twice (docs/methods/compressors/deft.md,
        # "What the tests check")
        assert selected.unique().numel() == selected.numel()
        assert selected.numel() <= k + num_layers
        if name == "deft-exact":
            assert abs(selected.numel() - k) <= num_layers
        mean = sum(r["compensated"] for r in records) / 4
        for r in records:
            assert torch.equal(r["selected"], selected)
            # The same output everywhere, bit for bit; the residual plus what was sent is the
            # compensated gradient
            assert torch.equal(r["out"], records[0]["out"])
            torch.testing.assert_close(r["out"][selected], mean[selected])
            assert torch.equal(r["residual"] + r["transmitted"], r["compensated"])
            assert torch.count_nonzero(r["residual"][selected]) == 0


def test_deft_workers_select_their_own_bin_with_their_own_k(four_workers):
    # Recompute the protocol from the definitions: the decision worker (t mod n) packs bins
    # from its own local k's; worker r takes bin (t mod n + r) mod n and selects its local k_j
    # in each of those layers. What it put on the wire tells how many indices it selected.
    n, k = 4, int(DENSITY * sum(SIZES))
    ranges = partition_layers(SIZES, n)
    lengths = [e - s for s, e in ranges]
    for step in range(4):
        records = [r["deft"][step] for r in four_workers]
        local_ks = [
            assign_local_k(range_norms(r["compensated"], ranges), lengths, k) for r in records
        ]
        plan = lpt_bins(lengths, local_ks[decision_worker(step, n)], n)
        union = records[0]["selected"].numel()
        for rank, r in enumerate(records):
            own_layers = plan.bins[bin_for_rank(rank, step, n)]
            expected_own = sum(local_ks[rank][j] for j in own_layers)
            plan_bytes = 4 * (n + len(ranges)) if rank == decision_worker(step, n) else 0
            assert r["bytes"] == plan_bytes + (4 * expected_own + 8) + 4 * union


def test_deft_with_more_workers_than_layers(tmp_path):
    # One 3-element tensor over 4 workers: three one-element layers, so one worker's bin is
    # empty; it selects nothing and still sends its values at the others' indices.
    results = run_world(_run, 4, tmp_path, ["deft"], 2, [3])
    for step in range(2):
        records = [r["deft"][step] for r in results]
        mean = sum(r["compensated"] for r in records) / 4
        for r in records:
            assert sorted(r["selected"].tolist()) == [0, 1, 2]
            torch.testing.assert_close(r["out"], mean)
