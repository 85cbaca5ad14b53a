"""DEFT's planning functions against what they guarantee (docs/methods/compressors/deft.md)."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from gradsync.algorithms.deft_plan import (
    assign_local_k,
    bin_for_rank,
    local_k_bound,
    lpt_bins,
    partition_layers,
    selection_cost,
)

RESNET_LIKE = [1728, 64, 64, 36864, 64, 64, 36864, 64, 64, 73728, 128, 128, 147456, 5120, 10]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 16])
def test_partition_covers_everything_contiguously(n):
    ranges = partition_layers(RESNET_LIKE, n)
    total = sum(RESNET_LIKE)
    assert ranges[0][0] == 0 and ranges[-1][1] == total
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    threshold = total / n
    for size in RESNET_LIKE:
        assert all((e - s) <= max(threshold, math.ceil(size / n)) for s, e in ranges)


def test_split_pieces_differ_by_at_most_one():
    ranges = partition_layers([10, 103], 4)  # 103 > 113/4 is split into 26, 26, 26, 25
    assert [e - s for s, e in ranges] == [10, 26, 26, 26, 25]


def _random_case(rng: random.Random) -> tuple[list[float], list[int]]:
    layers = rng.randint(1, 12)
    sizes = [rng.randint(1, 500) for _ in range(layers)]
    norms = [rng.random() * 10 for _ in range(layers)]
    return norms, sizes


@pytest.mark.parametrize("seed", range(50))
def test_local_k_is_within_bounds_and_near_k(seed):
    rng = random.Random(seed)
    norms, sizes = _random_case(rng)
    k = rng.randint(1, sum(sizes))
    for exact in (False, True):
        ks = assign_local_k(norms, sizes, k, exact=exact)
        assert all(1 <= kj <= nj for kj, nj in zip(ks, sizes, strict=True))
    ks = assign_local_k(norms, sizes, k, exact=True)
    if k >= len(sizes) and all(kj < nj for kj, nj in zip(ks, sizes, strict=True)):
        assert sum(ks) == k


def test_exact_k_sums_to_k_and_is_proportional():
    norms, sizes = [4.0, 2.0, 1.0, 1.0], [10_000] * 4
    ks = assign_local_k(norms, sizes, 800, exact=True)
    assert sum(ks) == 800
    for kj, norm in zip(ks, norms, strict=True):
        assert abs(kj - 800 * norm / sum(norms)) < len(norms)


def _exact_case(rng: random.Random) -> tuple[list[float], list[int], int]:
    """Layers of varied sizes (many tiny ones, so caps bind), norms with zeros and wide
    spreads, and any k from the non-zero layers' count up to every element."""
    layers = rng.randint(1, 40)
    sizes = [rng.choice([1, 2, 3, rng.randint(1, 50), rng.randint(1, 5000)]) for _ in range(layers)]
    norms = [rng.choice([0.0, rng.random(), rng.random() * 1e4]) for _ in range(layers)]
    nonzero = sum(norm > 0 for norm in norms)
    return norms, sizes, rng.randint(max(nonzero, 1), sum(sizes))


@pytest.mark.parametrize("seed", range(20))
def test_exact_k_sums_to_k_whenever_k_covers_the_nonzero_layers(seed):
    rng = random.Random(seed)
    for _ in range(200):
        norms, sizes, k = _exact_case(rng)
        ks = assign_local_k(norms, sizes, k, exact=True)
        assert sum(ks) == k, (norms, sizes, k, ks)
        assert all(0 <= kj <= nj for kj, nj in zip(ks, sizes, strict=True))
        # A layer with something to select gets at least one element, and so does every layer
        # when k covers them all.
        assert all(kj >= 1 for kj, norm in zip(ks, norms, strict=True) if norm > 0 or k >= len(ks))


def test_exact_k_holds_back_one_element_for_each_layer_still_to_come():
    assert assign_local_k([100.0, 1.0, 1.0], [10, 10, 10], 3, exact=True) == [1, 1, 1]
    # A cap at the tail: the layers before it take what it cannot hold.
    assert assign_local_k([10.0, 9.0], [100, 1], 50, exact=True) == [49, 1]


def test_exact_k_on_resnet18_at_16_workers():
    """The case that was reported: 122 layers at density 0.001, where the sum passed k by 13."""
    from gradsync.data.spec import DataSpec
    from gradsync.models.resnet import ResNet

    model = ResNet(
        spec=DataSpec(task="classification", num_classes=10, input_shape=(3, 32, 32)), depth=18
    )
    sizes = [p.numel() for p in model.parameters()]
    ranges = partition_layers(sizes, 16)
    lengths = [end - start for start, end in ranges]
    k = int(0.001 * sum(sizes))
    assert len(ranges) == 122
    rng = random.Random(0)
    for _ in range(20):
        norms = [rng.lognormvariate(0, 2) for _ in ranges]
        assert sum(assign_local_k(norms, lengths, k, exact=True)) == k


@pytest.mark.parametrize("seed", range(8))
def test_local_k_bound_holds_whatever_the_norms(seed):
    # What a lone worker's selection is sized by before it reads anything.
    rng = random.Random(seed)
    for _ in range(60):
        norms, sizes, _ = _exact_case(rng)
        for k in (1, len(sizes), rng.randint(1, sum(sizes)), sum(sizes) + 5):
            for exact in (False, True):
                bound = local_k_bound(sizes, k, exact=exact)
                assert sum(assign_local_k(norms, sizes, k, exact=exact)) <= bound
                if exact and k >= len(sizes):
                    assert sum(assign_local_k(norms, sizes, k, exact=True)) == bound


def _rounding_with_fsum(norms: list[float], sizes: list[int], k: int) -> list[int]:
    """The default rounding as it was first written, the norms summed by ``math.fsum``."""
    ks, k_rem, norm_rem = [0] * len(norms), k, math.fsum(norms)
    for j in sorted(range(len(norms)), key=lambda j: (norms[j], j), reverse=True):
        share = math.floor(k_rem * norms[j] / norm_rem) if norm_rem > 0 else 0
        ks[j] = min(sizes[j], max(1, share))
        k_rem, norm_rem = k_rem - ks[j], norm_rem - norms[j]
    return ks


def test_norms_summed_from_the_smallest_up_round_as_an_exact_sum_does():
    # Norms of float32 gradients within 2**20 of each other sum exactly in float64, in any
    # order: the order a device repeats changes nothing there.
    rng = random.Random(0)
    for _ in range(500):
        count = rng.randint(1, 60)
        norms = [float(np.float32(rng.uniform(1e-3, 1e3))) for _ in range(count)]
        norms += [0.0] * rng.randint(0, 3)
        sizes = [rng.randint(1, 5000) for _ in norms]
        k = rng.randint(1, sum(sizes))
        assert assign_local_k(norms, sizes, k) == _rounding_with_fsum(norms, sizes, k)


def test_default_mode_keeps_the_reference_rounding():
    # floor with a running remainder: 7·3/6 = 3.5 -> 3, then 4·2/3 = 2.67 -> 2, then 2·1/1 = 2.
    assert assign_local_k([3.0, 2.0, 1.0], [100, 100, 100], 7) == [3, 2, 2]
    # Every layer gets at least one element, even past k.
    assert assign_local_k([5.0, 0.0, 0.0], [10, 10, 10], 1) == [1, 1, 1]


def _brute_force_makespan(costs: list[float], n: int) -> float:
    best = math.inf
    for assignment in itertools.product(range(n), repeat=len(costs)):
        loads = [0.0] * n
        for layer, b in enumerate(assignment):
            loads[b] += costs[layer]
        best = min(best, max(loads))
    return best


@pytest.mark.parametrize("seed", range(40))
def test_bins_partition_the_layers_and_meet_the_lpt_bound(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 3)
    sizes = [rng.randint(2, 300) for _ in range(rng.randint(1, 8))]
    ks = [rng.randint(1, s) for s in sizes]
    plan = lpt_bins(sizes, ks, n)
    placed = sorted(j for b in plan.bins for j in b) + plan.common
    assert sorted(placed) == list(range(len(sizes)))
    assert all(ks[j] == sizes[j] for j in plan.common)
    costs = [selection_cost(sizes[j], ks[j]) for j in range(len(sizes)) if j not in plan.common]
    if costs:
        optimum = _brute_force_makespan(costs, n)
        assert max(plan.loads) <= (4 / 3 - 1 / (3 * n)) * optimum + 1e-9


@pytest.mark.parametrize("n", [1, 2, 5])
def test_rank_to_bin_is_a_bijection_that_rotates(n):
    for step in range(2 * n):
        assert sorted(bin_for_rank(r, step, n) for r in range(n)) == list(range(n))
    assert [bin_for_rank(0, step, n) for step in range(n)] == list(range(n))


def test_one_worker_selects_every_layer():
    sizes = [50, 20, 30]
    ks = assign_local_k([1.0, 2.0, 3.0], sizes, 10)
    plan = lpt_bins(sizes, ks, 1)
    assert sorted(plan.bins[0] + plan.common) == [0, 1, 2]
    assert partition_layers(sizes, 1) == [(0, 50), (50, 70), (70, 100)]
