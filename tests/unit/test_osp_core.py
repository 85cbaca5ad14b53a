"""OSP's pure core (docs/methods/schedulers/osp.md, "How it works" and "What the tests check";
"osp.md" below): importance, GIB, U_max, schedule, LGP."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest
import torch

from gradsync.algorithms.osp_budget import umax_bytes
from gradsync.algorithms.osp_split import (
    SizeSchedule,
    layer_bytes,
    layer_importance,
    lgp_correct,
    lgp_step,
    split_unimportant,
)

# --------------------------------------------------------------------------- importance (eq. 4)


def test_importance_matches_a_hand_computation():
    grads = [torch.tensor([1.0, -2.0]), torch.tensor([[0.5, 0.0], [-3.0, 0.25]])]
    params = [torch.tensor([3.0, 4.0]), torch.tensor([[-2.0, 7.0], [1.0, -4.0]])]
    # |1·3| + |−2·4| = 11;  |0.5·−2| + |0·7| + |−3·1| + |0.25·−4| = 1 + 0 + 3 + 1 = 5
    assert layer_importance(grads, params) == [11.0, 5.0]


def test_importance_is_summed_in_float64():
    # One product of 1 and ten thousand of 1e-8: float32 cannot hold 1.0001 to 1e-12.
    g = torch.tensor([1.0] + [1e-4] * 10_000, dtype=torch.float32)
    p = torch.tensor([1.0] + [1e-4] * 10_000, dtype=torch.float32)
    exact = math.fsum(abs(a * b) for a, b in zip(g.tolist(), p.tolist(), strict=True))
    (value,) = layer_importance([g], [p])
    assert value == pytest.approx(exact, rel=1e-12, abs=0)
    assert isinstance(value, float)


def test_importance_on_random_layers_and_leaves_inputs_alone():
    gen = torch.Generator().manual_seed(3)
    shapes = [(5,), (3, 4), (2, 3, 2), (1,)]
    params = [torch.randn(s, generator=gen, requires_grad=True) for s in shapes]
    grads = [torch.randn(s, generator=gen) for s in shapes]
    before = [g.clone() for g in grads]
    got = layer_importance(grads, params)
    want = [
        math.fsum(
            abs(a * b) for a, b in zip(g.flatten().tolist(), p.flatten().tolist(), strict=True)
        )
        for g, p in zip(grads, params, strict=True)
    ]
    assert got == pytest.approx(want, rel=1e-12)
    assert all(torch.equal(a, b) for a, b in zip(grads, before, strict=True))


def test_importance_rejects_mismatched_inputs():
    assert layer_importance([], []) == []
    with pytest.raises(ValueError, match="gradients"):
        layer_importance([torch.ones(2)], [])
    with pytest.raises(ValueError, match="layer 1"):
        layer_importance([torch.ones(2), torch.ones(3)], [torch.ones(2), torch.ones(2, 2)])


def test_layer_bytes_uses_the_element_size():
    params = [torch.zeros(3, 4), torch.zeros(5, dtype=torch.float64), torch.zeros(0)]
    assert layer_bytes(params) == [48, 40, 0]


# --------------------------------------------------------------------------- the GIB (osp.md)


def _reference_gib(importance, sizes, budget):
    """Straight from the spec: ascending (importance, index); stop at the first overflow."""
    flags = [True] * len(importance)
    if budget <= 0:
        return flags
    total = 0
    for _, i in sorted((imp, i) for i, imp in enumerate(importance)):
        if total + sizes[i] > budget:
            break
        total += sizes[i]
        flags[i] = False
    return flags


def test_gib_hand_case():
    # ascending: layer 1 (1), layer 3 (2), layer 2 (3), layer 0 (5); two 4-byte layers fit in 8
    assert split_unimportant([5.0, 1.0, 3.0, 2.0], [4, 4, 4, 4], 8) == [True, False, True, False]
    # an exact fit is allowed
    assert split_unimportant([5.0, 1.0, 3.0, 2.0], [4, 4, 4, 4], 12) == [True, False, False, False]
    assert split_unimportant([5.0, 1.0, 3.0, 2.0], [4, 4, 4, 4], 11.9) == [True, False, True, False]


def test_gib_stops_at_the_first_layer_that_would_overflow():
    # layer 0 fits (4 ≤ 6); layer 1 would make 14 > 6: stop. Layer 2 (1 byte) would still fit
    # but is more important than layer 1, so it must stay important.
    assert split_unimportant([1.0, 2.0, 3.0], [4, 10, 1], 6) == [False, True, True]
    # the very first layer too large: nothing is unimportant
    assert split_unimportant([1.0, 2.0, 3.0], [100, 1, 1], 50) == [True, True, True]


def test_gib_budget_zero_keeps_everything_important():
    sizes = [4, 0, 8, 0]
    for budget in (0, 0.0, -5):
        assert split_unimportant([0.0, 0.0, 1.0, 2.0], sizes, budget) == [True] * 4
    assert split_unimportant([], [], 10) == []


def test_gib_unlimited_budget_makes_everything_unimportant():
    assert split_unimportant([3.0, 1.0, 2.0], [4, 4, 4], math.inf) == [False, False, False]


def test_gib_ties_are_broken_by_layer_index():
    assert split_unimportant([1.0, 1.0, 1.0], [4, 4, 4], 8) == [False, False, True]
    assert split_unimportant([0.0, 0.0, 0.0], [4, 10, 1], 6) == [False, True, True]


def test_gib_nan_importance_counts_as_most_important():
    assert split_unimportant([math.nan, 2.0, 1.0], [4, 4, 4], 8) == [True, False, False]
    assert split_unimportant([math.nan, 2.0, 1.0], [4, 4, 4], 12) == [False, False, False]


def test_gib_rejects_bad_input():
    with pytest.raises(ValueError, match="importances"):
        split_unimportant([1.0], [4, 4], 8)
    with pytest.raises(ValueError, match="≥ 0 bytes"):
        split_unimportant([1.0, 2.0], [4, -4], 8)
    with pytest.raises(ValueError, match="NaN"):
        split_unimportant([1.0], [4], math.nan)


def _random_instance(rng: random.Random, *, distinct: bool):
    n = rng.randint(0, 30)
    if distinct:
        importance = rng.sample(range(10 * n + 1), n)
        importance = [v / 7.0 for v in importance]
    else:
        importance = [float(rng.randint(0, 4)) for _ in range(n)]
    sizes = [rng.choice([0, 4, 8, 64, 400, 4096]) for _ in range(n)]
    budget = rng.choice([0, rng.uniform(0, 1.2 * sum(sizes) + 1), sum(sizes), math.inf])
    return importance, sizes, budget


def test_gib_random_instances_satisfy_the_invariants():
    rng = random.Random(0)
    for _ in range(500):
        importance, sizes, budget = _random_instance(rng, distinct=rng.random() < 0.5)
        flags = split_unimportant(importance, sizes, budget)
        assert flags == _reference_gib(importance, sizes, budget)
        unimportant = [i for i, f in enumerate(flags) if not f]
        important = [i for i, f in enumerate(flags) if f]
        # total unimportant bytes ≤ budget
        assert sum(sizes[i] for i in unimportant) <= budget or not unimportant
        # exactly the lowest-importance prefix (ties by index) ...
        order = sorted(range(len(importance)), key=lambda i: (importance[i], i))
        assert sorted(unimportant) == sorted(order[: len(unimportant)])
        # ... and the longest one that fits: the next layer would overflow
        if important and budget > 0:
            nxt = order[len(unimportant)]
            assert sum(sizes[i] for i in unimportant) + sizes[nxt] > budget
        # every unimportant layer is at most as important as every important one
        if unimportant and important:
            assert max(importance[i] for i in unimportant) <= min(importance[i] for i in important)


def test_gib_is_permutation_consistent():
    rng = random.Random(1)
    for _ in range(300):
        importance, sizes, budget = _random_instance(rng, distinct=True)
        flags = split_unimportant(importance, sizes, budget)
        perm = list(range(len(importance)))
        rng.shuffle(perm)
        permuted = split_unimportant(
            [importance[i] for i in perm], [sizes[i] for i in perm], budget
        )
        assert permuted == [flags[i] for i in perm]


def test_gib_with_ties_is_consistent_under_order_preserving_permutations():
    # Index tie-breaking: a permutation that keeps tied layers in their relative order
    # permutes the result.
    rng = random.Random(2)
    for _ in range(300):
        importance, sizes, budget = _random_instance(rng, distinct=False)
        flags = split_unimportant(importance, sizes, budget)
        perm = list(range(len(importance)))
        rng.shuffle(perm)
        # restore the relative order within each group of tied layers
        for value in set(importance):
            slots = [k for k, i in enumerate(perm) if importance[i] == value]
            members = sorted(perm[k] for k in slots)
            for k, i in zip(slots, members, strict=True):
                perm[k] = i
        permuted = split_unimportant(
            [importance[i] for i in perm], [sizes[i] for i in perm], budget
        )
        assert permuted == [flags[i] for i in perm]


def test_gib_matches_brute_force_on_small_instances():
    # The set is the largest k such that the k least important layers fit, checked over all
    # importance orders of four layers.
    sizes = [3, 5, 2, 7]
    for order in itertools.permutations(range(4)):
        importance = [0.0] * 4
        for rank, i in enumerate(order):
            importance[i] = float(rank)
        for budget in range(0, 19):
            flags = split_unimportant(importance, sizes, budget)
            k = 0
            while k < 4 and sum(sizes[i] for i in order[: k + 1]) <= budget and budget > 0:
                k += 1
            assert [i for i in range(4) if not flags[i]] == sorted(order[:k])


# ------------------------------------------------------------------ U_max ("The byte budget")


def test_umax_hand_values():
    # 10 Gbit/s = 1.25e9 B/s, 100 ms compute, 8 workers: 1.25e9·0.1/8 = 15.625 MB
    assert umax_bytes(1.25e9, 0.1, 8, 10**9) == pytest.approx(15_625_000.0)
    # lr = 0.25: paper multiplies by 1.25, corrected divides by 1.25
    assert umax_bytes(1.25e9, 0.1, 8, 10**9, loss_rate=0.25, formula="paper") == pytest.approx(
        15_625_000.0 * 1.25
    )
    assert umax_bytes(1.25e9, 0.1, 8, 10**9, loss_rate=0.25) == pytest.approx(15_625_000.0 / 1.25)


def test_umax_paper_and_corrected_agree_without_loss_and_differ_with_it():
    rng = random.Random(4)
    for _ in range(200):
        b = rng.uniform(1e6, 1e10)
        tc = rng.uniform(1e-3, 2.0)
        n = rng.randint(1, 64)
        model = 10**12  # large, so the cap does not bind
        paper0 = umax_bytes(b, tc, n, model, formula="paper")
        corrected0 = umax_bytes(b, tc, n, model, formula="corrected")
        assert paper0 == corrected0
        lr = rng.uniform(0.001, 0.5)
        paper = umax_bytes(b, tc, n, model, loss_rate=lr, formula="paper")
        corrected = umax_bytes(b, tc, n, model, loss_rate=lr, formula="corrected")
        assert paper == pytest.approx(paper0 * (1 + lr), rel=1e-12)
        assert corrected == pytest.approx(paper0 / (1 + lr), rel=1e-12)
        # losses slow the link: the corrected bound shrinks, the paper's grows
        assert corrected < paper0 < paper


def test_umax_is_capped_at_80_percent_of_the_model():
    # uncapped would be 1.25e9·1.0/1 = 1.25e9 bytes, far above the model
    assert umax_bytes(1.25e9, 1.0, 1, 1000) == pytest.approx(800.0)
    assert umax_bytes(1.25e9, 1.0, 1, 1000, formula="paper") == pytest.approx(800.0)
    assert umax_bytes(1.25e9, 1.0, 1, 1000, cap=1.0) == pytest.approx(1000.0)
    assert umax_bytes(1.25e9, 1.0, 1, 1000, cap=None) == pytest.approx(1.25e9)
    # a cap that does not bind leaves the value alone
    assert umax_bytes(100.0, 1.0, 4, 1000) == pytest.approx(25.0)
    rng = random.Random(5)
    for _ in range(200):
        model = rng.randint(0, 10**9)
        u = umax_bytes(rng.uniform(0, 1e10), rng.uniform(0, 1), rng.randint(1, 16), model)
        assert 0 <= u <= 0.8 * model


def test_umax_rejects_bad_input():
    with pytest.raises(ValueError, match="paper, corrected") as info:
        umax_bytes(1e9, 0.1, 8, 10**6, formula="fixed")
    assert "'fixed'" in str(info.value)
    with pytest.raises(ValueError, match="workers"):
        umax_bytes(1e9, 0.1, 0, 10**6)
    with pytest.raises(ValueError, match="bandwidth"):
        umax_bytes(-1.0, 0.1, 8, 10**6)
    with pytest.raises(ValueError, match="compute_s"):
        umax_bytes(1e9, math.nan, 8, 10**6)
    with pytest.raises(ValueError, match="loss_rate"):
        umax_bytes(1e9, 0.1, 8, 10**6, loss_rate=-0.1)
    with pytest.raises(ValueError, match="cap"):
        umax_bytes(1e9, 0.1, 8, 10**6, cap=-1.0)


# --------------------------------------------------------------- schedule ("The byte budget")


def _run(schedule: SizeSchedule, losses: list[float]) -> list[float]:
    """Budgets for epochs 0..len(losses), feeding each epoch the previous epoch's loss."""
    budgets = [schedule.budget_for_epoch(0, None)]
    for epoch, loss in enumerate(losses, start=1):
        budgets.append(schedule.budget_for_epoch(epoch, loss))
    return budgets


def test_schedule_hand_case():
    s = SizeSchedule(umax=100.0)
    assert s.budget_for_epoch(0, None) == 0.0
    assert s.first_loss is None
    assert s.budget_for_epoch(1, 2.0) == 0.0  # L = 2.0, the first epoch's loss
    assert s.first_loss == 2.0
    assert s.budget_for_epoch(2, 1.0) == pytest.approx(50.0)
    assert s.budget_for_epoch(3, 0.5) == pytest.approx(75.0)
    assert s.budget_for_epoch(4, 0.0) == pytest.approx(100.0)
    assert s.budget_for_epoch(5, 3.0) == 0.0  # the loss rose above L: clamped to 0 (BSP)
    assert s.budget_for_epoch(6, -1.0) == 100.0  # clamped to U_max
    assert s.budget_for_epoch(7, math.nan) == 0.0
    assert s.budget_for_epoch(8, math.inf) == 0.0
    assert s.first_loss == 2.0  # L is recorded once


def test_schedule_random_invariants():
    rng = random.Random(6)
    for _ in range(200):
        model = rng.randint(1, 10**8)
        umax = umax_bytes(rng.uniform(1e6, 1e10), rng.uniform(0.01, 1), rng.randint(1, 16), model)
        assert umax <= 0.8 * model
        first = rng.uniform(0.1, 10.0)
        losses = [first]
        for _ in range(rng.randint(0, 30)):
            losses.append(losses[-1] * rng.uniform(0.5, 1.0))  # non-increasing
        budgets = _run(SizeSchedule(umax=umax), losses)
        assert budgets[0] == 0.0 and budgets[1] == 0.0
        assert all(0.0 <= b <= umax for b in budgets)
        assert all(a <= b for a, b in itertools.pairwise(budgets))
        # with a rising loss anywhere above L, the budget drops to 0
        rising = [*losses, first * rng.uniform(1.0, 3.0)]
        assert _run(SizeSchedule(umax=umax), rising)[-1] == 0.0


def test_schedule_feeds_the_gib_without_exceeding_it():
    rng = random.Random(7)
    sizes = [rng.choice([16, 256, 4096, 65536]) for _ in range(40)]
    umax = umax_bytes(1.25e9, 0.05, 8, sum(sizes))
    s = SizeSchedule(umax=umax)
    loss = None
    for epoch in range(12):
        budget = s.budget_for_epoch(epoch, loss)
        importance = [rng.random() for _ in sizes]
        flags = split_unimportant(importance, sizes, budget)
        assert sum(sz for sz, f in zip(sizes, flags, strict=True) if not f) <= budget
        if epoch < 2:
            assert all(flags)  # pure BSP while S = 0
        loss = 2.0 / (epoch + 1)


def test_schedule_state_round_trip():
    losses = [2.0, 1.5, 1.2, 1.0, 1.1, 0.7]
    whole = _run(SizeSchedule(umax=1000.0), losses)

    for cut in range(len(losses) + 1):
        first = SizeSchedule(umax=1000.0)
        part = [first.budget_for_epoch(0, None)]
        for epoch in range(1, cut + 1):
            part.append(first.budget_for_epoch(epoch, losses[epoch - 1]))
        state = json.loads(json.dumps(first.state_dict()))  # plain numbers survive JSON
        assert set(state) == {"umax", "first_loss"}
        resumed = SizeSchedule(umax=0.0)
        resumed.load_state_dict(state)
        assert resumed == first
        for epoch in range(cut + 1, len(losses) + 1):
            part.append(resumed.budget_for_epoch(epoch, losses[epoch - 1]))
        assert part == whole


def test_schedule_rejects_bad_calls():
    s = SizeSchedule(umax=10.0)
    with pytest.raises(ValueError, match="epoch 0"):
        s.budget_for_epoch(0, 1.0)
    with pytest.raises(ValueError, match="mean training loss of epoch 2"):
        s.budget_for_epoch(3, None)
    with pytest.raises(ValueError, match="≥ 0"):
        s.budget_for_epoch(-1, None)
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="first epoch"):
            SizeSchedule(umax=10.0).budget_for_epoch(1, bad)


# --------------------------------------------------------------------------- LGP (eq. 6, 7)


def test_lgp_correction_restores_the_global_parameters():
    # dyadic values, so the float arithmetic is exact
    prev = torch.tensor([1.0, -2.0, 0.5])
    local = torch.tensor([-0.25, 0.125, -0.5])
    glob = torch.tensor([-0.125, 0.25, -0.375])
    partial = lgp_step(prev, local)
    # before the correction the error is Δ(G^l) − Δ(G^g) (osp.md, "What the tests check")
    assert torch.equal(partial - (prev + glob), local - glob)
    corrected = lgp_correct(local, glob, partial)
    assert torch.equal(corrected, prev + glob)
    # out of place
    assert torch.equal(partial, prev + local)
    # updates made on top of the partial parameters meanwhile are kept
    later = torch.tensor([0.5, 0.5, -0.25])
    assert torch.equal(lgp_correct(local, glob, partial + later), prev + glob + later)


def test_lgp_with_all_layers_delayed_ends_at_the_bsp_parameters():
    # osp.md, "What the tests check": on a quadratic with a constant gradient per worker,
    # whatever the GIB of each iteration, once the last ICS correction lands every worker holds
    # the BSP parameters.
    gen = torch.Generator().manual_seed(8)
    workers, layers, steps, eta = 4, 5, 12, 0.1
    start = [torch.randn(3, generator=gen, dtype=torch.float64) for _ in range(layers)]
    grads = [
        [torch.randn(3, generator=gen, dtype=torch.float64) for _ in range(layers)]
        for _ in range(workers)
    ]
    global_delta = [
        -eta * sum(grads[w][k] for w in range(workers)) / workers for k in range(layers)
    ]
    bsp = [p + steps * d for p, d in zip(start, global_delta, strict=True)]

    rng = random.Random(9)
    for w in range(workers):
        params = [p.clone() for p in start]
        pending: list[tuple[int, torch.Tensor]] = []  # ICS in flight: (layer, local delta)
        for _ in range(steps):
            gib = [rng.random() < 0.5 for _ in range(layers)]  # True = important
            for layer, local in pending:  # last iteration's ICS arrives during this one
                params[layer] = lgp_correct(local, global_delta[layer], params[layer])
            pending = []
            for layer in range(layers):
                if gib[layer]:
                    params[layer] = lgp_step(params[layer], global_delta[layer])
                else:
                    local = -eta * grads[w][layer]
                    params[layer] = lgp_step(params[layer], local)
                    pending.append((layer, local))
        for layer, local in pending:  # the last ICS arrives
            params[layer] = lgp_correct(local, global_delta[layer], params[layer])
        for got, want in zip(params, bsp, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
