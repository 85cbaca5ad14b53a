"""DeFT's knapsack solvers against brute force (docs/methods/schedulers/deft.md, "The knapsacks",
"Two links" and "What the tests check")."""

from __future__ import annotations

import itertools
import random

import pytest

from gradsync.algorithms.knapsack import (
    naive_knapsack,
    recursive_knapsack,
    two_link_exact,
    two_link_greedy,
)


def _best_subset_sum(costs: list[int], cap: int) -> int:
    best = 0
    for r in range(len(costs) + 1):
        for subset in itertools.combinations(costs, r):
            if sum(subset) <= cap:
                best = max(best, sum(subset))
    return best


def test_naive_knapsack_is_the_exact_subset_sum_optimum():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(0, 15)
        costs = [rng.randint(1, 40) for _ in range(n)]
        cap = rng.randint(0, 120)
        chosen = naive_knapsack(costs, cap, unit=1)
        assert len(set(chosen)) == len(chosen)
        total = sum(costs[i] for i in chosen)
        assert total <= cap
        assert total == _best_subset_sum(costs, cap)


def test_naive_knapsack_rounds_times_up_so_a_choice_always_fits():
    # 33.49 ticks of 10 µs each: rounded down, all three (99 ticks) would seem to fit 1 ms.
    costs = [0.3349e-3, 0.3349e-3, 0.3349e-3]
    chosen = naive_knapsack(costs, 1.0e-3)
    assert len(chosen) == 2 and sum(costs[i] for i in chosen) <= 1.0e-3


def test_two_link_greedy_is_feasible_and_never_beats_the_exact_assignment():
    rng = random.Random(1)
    for _ in range(150):
        n = rng.randint(0, 8)
        costs = [rng.uniform(0.1, 3.0) for _ in range(n)]
        capacity, mu = rng.uniform(0.5, 6.0), rng.choice([1.0, 1.65, 2.5])
        greedy = two_link_greedy(costs, capacity, mu)
        exact = two_link_exact(costs, capacity, mu)
        used = [*greedy.fast, *greedy.slow]
        assert len(used) == len(set(used))  # every bucket at most once
        assert sum(costs[i] for i in greedy.fast) <= capacity + 1e-9
        # The slow sack holds window/μ (docs/methods/schedulers/deft.md, "Two links").
        assert mu * sum(costs[i] for i in greedy.slow) <= capacity + 1e-9
        assert greedy.value(costs) <= exact.value(costs) + 1e-9


def test_recursive_knapsack_is_at_least_the_plain_knapsack_and_its_own_tail():
    rng = random.Random(2)
    for _ in range(150):
        n = rng.randint(0, 9)
        costs = [rng.randint(1, 30) for _ in range(n)]
        backward = [rng.randint(1, 20) for _ in range(n)]
        cap = rng.randint(0, 80)
        chosen = recursive_knapsack(costs, backward, cap, unit=1)
        value = sum(costs[i] for i in chosen)
        assert value <= cap
        assert value >= sum(costs[i] for i in naive_knapsack(costs, cap, unit=1))
        if n > 1:
            tail = recursive_knapsack(costs[1:], backward[1:], cap - backward[1], unit=1)
            assert value >= sum(costs[1:][i] for i in tail)


def test_recursive_knapsack_hand_cases():
    # Both fit now: o1 = {0, 1} = 10 beats o2 = {1} in the 8 left after bucket 1's backward.
    assert recursive_knapsack([5, 5], [1, 2], 10, unit=1) == [0, 1]
    # A tie (4 now, or 4 after waiting 1 for bucket 1) goes to the later choice, o2.
    assert recursive_knapsack([4, 4], [0, 1], 5, unit=1) == [1]
    # o1 = {0} = 6 beats o2 = {1} = 5.
    assert recursive_knapsack([6, 5], [1, 1], 6, unit=1) == [0]


@pytest.mark.parametrize("cap", [0, -1.0])
def test_an_empty_window_holds_nothing(cap):
    assert naive_knapsack([1.0, 2.0], cap) == []
    assert recursive_knapsack([1.0, 2.0], [1.0, 1.0], cap) == []
