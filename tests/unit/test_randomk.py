"""Random-k's index set (``gradsync/compressors/randomk.py``): k distinct indices, uniform among
all k-subsets, the same on every worker for one (seed, step, group name) and another at the next
step, drawn on the device in a fixed number of operations with no host synchronization."""

from __future__ import annotations

import math
from itertools import combinations

import pytest
import torch

from benchmarks.op_counts import count
from gradsync.compressors.code_paths import gpu_branches
from gradsync.compressors.counter_draws import draw_key
from gradsync.compressors.randomk import (
    SHORT_LOG2,
    RandomKCompressor,
    draws_for,
    first_distinct,
    random_subset,
)
from gradsync.types import GroupInfo

CPU = torch.device("cpu")


def _pick(compressor: RandomKCompressor, n: int, *, step: int, name: str = "w") -> torch.Tensor:
    payload, ctx = compressor.compress(torch.randn(n), group=GroupInfo(name, step, 0))
    indices = compressor.selected(payload, ctx)
    assert indices is not None
    return indices


def _chi_square_bound(cells: int) -> float:
    """A bound that a chi-square statistic of ``cells - 1`` degrees of freedom passes but once
    in about 10^9 runs (mean plus 6 standard deviations, and then some)."""
    df = cells - 1
    return df + 6 * math.sqrt(2 * df) + 10


@pytest.mark.parametrize(("n", "k"), [(10**6, 1000), (1000, 10), (40, 10), (7, 7), (5, 1), (9, 0)])
def test_indices_are_k_distinct_ones_inside_the_tensor(n, k):
    pick = random_subset(n, k, draw_key(n, k), CPU)
    assert pick.dtype == torch.int64 and pick.numel() == k
    assert pick.unique().numel() == k
    assert k == 0 or (int(pick.min()) >= 0 and int(pick.max()) < n)


def test_two_workers_draw_the_same_set_and_another_at_the_next_step():
    worker_a, worker_b = (
        RandomKCompressor(density=0.01, seed=3),
        RandomKCompressor(density=0.01, seed=3),
    )
    n = 20_000
    same = [torch.equal(_pick(worker_a, n, step=s), _pick(worker_b, n, step=s)) for s in range(3)]
    assert all(same)
    first, second = _pick(worker_a, n, step=0), _pick(worker_a, n, step=1)
    assert torch.isin(first, second).float().mean() < 0.2  # two independent 1% samples
    other_name = _pick(worker_a, n, step=0, name="v")
    assert not torch.equal(first, other_name)


@pytest.mark.parametrize(("n", "k"), [(60, 6), (30, 12)])
def test_every_index_is_as_likely_as_another(n, k):
    """(60, 6) takes the draws; (30, 12) a permutation's first k. Each index is picked with
    probability k/n; over T subsets its count has variance T·(k/n)(1 - k/n)."""
    assert (draws_for(n, k) < n) == (n == 60)
    trials = 3000
    counts = torch.zeros(n, dtype=torch.float64)
    for trial in range(trials):
        counts[random_subset(n, k, draw_key(1, trial), CPU)] += 1
    p = k / n
    statistic = float(((counts - trials * p) ** 2).sum() / (trials * p * (1 - p)))
    assert statistic < _chi_square_bound(n)


def test_every_subset_is_as_likely_as_another():
    """Uniform among k-subsets, not only in each index: all 15 pairs of 6 values come up alike
    from the first two distinct values of 12 draws."""
    gen, trials = torch.Generator().manual_seed(2), 6000
    pairs = {pair: 0 for pair in combinations(range(6), 2)}
    for _ in range(trials):
        draws = torch.randint(6, (12,), generator=gen)
        if draws.unique().numel() < 2:  # one in 6^11: never, but not this test's point
            continue
        pairs[tuple(sorted(first_distinct(draws, 2).tolist()))] += 1
    expected = trials / len(pairs)
    statistic = sum((c - expected) ** 2 / expected for c in pairs.values())
    assert statistic < _chi_square_bound(len(pairs))


def test_the_first_distinct_values_are_taken_in_the_order_they_came_up():
    draws = torch.tensor([5, 5, 2, 9, 2, 7, 1, 9])
    assert sorted(first_distinct(draws, 3).tolist()) == [2, 5, 9]
    assert sorted(first_distinct(draws, 5).tolist()) == [1, 2, 5, 7, 9]


def _short_probability(n: int, k: int, m: int) -> float:
    """The exact probability that m draws from n values hold fewer than k distinct ones."""
    distinct = [1.0] + [0.0] * k  # distinct[j]: j distinct so far (k: k or more)
    for _ in range(m):
        after = [0.0] * (k + 1)
        for j, p in enumerate(distinct):
            if j == k:
                after[k] += p
                continue
            after[j] += p * j / n
            after[j + 1] += p * (n - j) / n
        distinct = after
    return sum(distinct[:k])  # summed, not 1 - distinct[k], which rounds below 1e-16


@pytest.mark.parametrize(("n", "k"), [(10_000, 100), (1000, 200), (10**6, 20)])
def test_the_draws_fall_short_of_k_distinct_values_astronomically_rarely(n, k):
    m = draws_for(n, k)
    assert k < m < n
    assert _short_probability(n, k, m) < 2.0**SHORT_LOG2
    # ...and the margin is not wasteful: a sixth of it falls short a thousand times as often.
    assert _short_probability(n, k, k + (m - k) // 6) > 1000 * 2.0**SHORT_LOG2


def test_drawing_waits_on_nothing_and_counts_the_same_whatever_the_size():
    counts = []
    with gpu_branches():
        for n, k in [(10**6, 1000), (25 * 10**6, 25_000), (1000, 3)]:
            counts.append(count(lambda n=n, k=k: random_subset(n, k, draw_key(0), CPU)))
    assert all(not c.syncs for c in counts), [dict(c.syncs) for c in counts]
    assert len({c.operations for c in counts}) == 1


def test_the_draws_are_a_function_of_the_key_alone_not_of_a_device_generator():
    """A generator's CUDA draws depend on the GPU's number of multiprocessors; counter-based
    draws on a CPU and on a GPU are the same numbers: the same key gives the same set."""
    key = draw_key(3, 7, "layer")
    first = random_subset(10**6, 1000, key, CPU)
    torch.manual_seed(123)  # the global generator plays no part
    assert torch.equal(random_subset(10**6, 1000, key, CPU), first)
    assert not torch.equal(random_subset(10**6, 1000, draw_key(3, 8, "layer"), CPU), first)


@pytest.mark.parametrize(("n", "k"), [(10**6, 1000), (300, 200)])
def test_the_gpus_route_draws_the_cpus_set(n, k):
    """The hashes compiled (the GPU's route) are the eager reference's, bit for bit: the same
    key gives the same set on either route, through the draws and through the smallest hashes."""
    key = draw_key(5, 1, "w")
    on_cpu = random_subset(n, k, key, CPU)
    with gpu_branches():
        compiled = random_subset(n, k, key, CPU)
    assert torch.equal(compiled.sort().values, on_cpu.sort().values)
