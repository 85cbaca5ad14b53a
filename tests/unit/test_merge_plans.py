"""Merge planning for the pipelined sparse schedulers (docs/methods/schedulers/omgs.md): the
timeline model, each rule's decisions on hand-computed examples, and the exact planner against
brute force."""

from __future__ import annotations

import math
import random

import pytest

from gradsync.algorithms.costs import CostModel, fit_alpha_beta, fit_gamma, fit_gamma_delta
from gradsync.algorithms.merge_plans import (
    OMGS_RULES,
    Layers,
    brute_force_plan,
    code_rule,
    exposed_comm_seconds,
    groups_of,
    iteration_seconds,
    no_merge,
    optimal_plan,
    paper_rule,
    random_instance,
    safe_rule,
    single_group,
    threshold_groups,
    timeline,
)

# Three equal layers of 1024 elements at density 1/1024: one element each on the wire (8 bytes).
# TKPM(1024) = 1e-3·10 = 0.010 s, TKPM(2048) = 0.022 s; AGPM = α + 1e-3 s per selected element.
THREE = Layers(backward=(0.01, 0.01, 0.01), sizes=(1024, 1024, 1024))


def _cost(alpha: float) -> CostModel:
    return CostModel(gamma=1e-3, alpha=alpha, beta=1e-3 / 8, density=1 / 1024)


def test_no_merge_timeline_follows_eqs_5_to_9():
    cost = _cost(alpha=0.05)
    times = timeline((1, 1, 1), THREE, cost)
    # τ_b, τ_s, t_s by eqs. (5)-(6); τ_c by eq. (7): max(end of own selection, previous comm end).
    assert [t.backward_start for t in times] == pytest.approx([0.0, 0.02, 0.04])
    assert [t.select_start for t in times] == pytest.approx([0.01, 0.03, 0.05])
    assert [t.select for t in times] == pytest.approx([0.01] * 3)
    assert [t.comm_start for t in times] == pytest.approx([0.02, 0.071, 0.122])
    assert [t.comm for t in times] == pytest.approx([0.051] * 3)
    assert iteration_seconds((1, 1, 1), THREE, cost, forward=0.5) == pytest.approx(0.673)
    assert exposed_comm_seconds((1, 1, 1), THREE, cost) == pytest.approx(0.173 - 0.06)


def test_a_single_group_is_eq_4():
    cost = _cost(alpha=0.05)
    d = sum(THREE.sizes)
    expected = 0.2 + sum(THREE.backward) + cost.select_seconds(d) + cost.comm_seconds(d)
    assert iteration_seconds(single_group(THREE), THREE, cost, forward=0.2) == pytest.approx(
        expected
    )
    assert cost.select_seconds(d) == pytest.approx(1e-3 / 1024 * 3072 * math.log2(3072))


def test_paper_rule_merges_when_q3_and_q5_hold():
    cost = _cost(alpha=0.05)
    # Layer 3 into 2: u = 0.02; Q3: 0.02 + 0.010 + 0.010 < τ_c 0.02 + 0.051; Q5: 0.02 + 0.05 >
    # 0.02 + 0.022. Then {3,2} into 1: u = 0.03; Q3: 0.03 + 0.022 + 0.010 < 0.042 + 0.052;
    # Q5: 0.042 + 0.05 > 0.03 + TKPM(3072) = 0.0648.
    assert paper_rule(THREE, cost) == (3,)
    assert iteration_seconds((3,), THREE, cost) < iteration_seconds((1, 1, 1), THREE, cost)


def test_paper_rule_keeps_layers_apart_when_q5_fails():
    cost = _cost(alpha=0.001)
    # Layer 3 into 2, Q5: 0.02 + 0.001 > 0.02 + 0.022 fails. Layer 2 into 1, Q3: u = 0.04,
    # 0.04 + 0.02 < τ_c 0.04 + 0.002 fails.
    assert paper_rule(THREE, cost) == (1, 1, 1)


def test_code_rule_always_merges_the_last_two_tensors_then_tests_tw_against_tsave():
    # Forced merge of layers 3 and 2; then tw = 0.01 + TKPM(3072) − 0.022 − 0.010 − idle 0
    # = 0.0128 < tsave = 0.052 + 0.051 − 0.053 = 0.05: merge.
    assert code_rule(THREE, _cost(alpha=0.05)) == (3,)
    # With α small the forced merge still happens; tsave = α = 0.001 < tw: stop there.
    assert code_rule(THREE, _cost(alpha=0.001)) == (2, 1)


def test_safe_and_optimal_on_the_golden_examples():
    # α = 0.05: t_iter of (1,1,1) 0.173, (2,1) 0.145, (1,2) 0.123, (3,) 0.1178. Safe merges
    # 3 into 2 (0.145 < 0.173), then {3,2} into 1 (0.1178 < 0.145); (3,) is also the optimum.
    comm_bound = _cost(alpha=0.05)
    assert iteration_seconds((1, 2), THREE, comm_bound) == pytest.approx(0.123)
    assert safe_rule(THREE, comm_bound) == optimal_plan(THREE, comm_bound) == (3,)
    # α = 0.001: (1,1,1) 0.062 beats (2,1) 0.064, (1,2) 0.065 and (3,) 0.0688: nothing merges.
    compute_bound = _cost(alpha=0.001)
    assert iteration_seconds((2, 1), THREE, compute_bound) == pytest.approx(0.064)
    assert safe_rule(THREE, compute_bound) == optimal_plan(THREE, compute_bound) == (1, 1, 1)


def test_threshold_grouping_closes_a_group_at_the_threshold():
    assert threshold_groups([5000, 4000, 100, 9000, 10, 20], 8192) == (2, 2, 2)
    assert threshold_groups([9000, 10], 8192) == (1, 1)  # the remainder is its own group
    assert threshold_groups([10, 10], 8192) == (2,)


def _random_instance(rng: random.Random, layers: int) -> tuple[Layers, CostModel]:
    return random_instance(rng, layers, densities=(0.001, 0.01))


def test_optimal_equals_brute_force_and_no_rule_beats_it():
    rng = random.Random(7)
    for trial in range(150):
        layers, cost = _random_instance(rng, rng.randint(1, 12 if trial < 10 else 9))
        best = iteration_seconds(brute_force_plan(layers, cost), layers, cost)
        optimal = iteration_seconds(optimal_plan(layers, cost), layers, cost)
        assert optimal == pytest.approx(best, rel=1e-12, abs=0)
        for rule in (*OMGS_RULES.values(), no_merge, single_group):
            assert iteration_seconds(rule(layers, cost), layers, cost) >= optimal * (1 - 1e-12)


def test_safe_is_never_worse_than_no_merge_and_the_paper_rule_sometimes_is():
    rng = random.Random(11)
    paper_worse = 0
    for _ in range(300):
        layers, cost = _random_instance(rng, rng.randint(2, 9))
        lags = iteration_seconds(no_merge(layers), layers, cost)
        assert iteration_seconds(safe_rule(layers, cost), layers, cost) <= lags
        paper_worse += iteration_seconds(paper_rule(layers, cost), layers, cost) > lags * (
            1 + 1e-12
        )
    # The paper's rule loses to no merging in about 10% of instances
    # (docs/methods/schedulers/omgs.md, "Published claim and what gradsync measured").
    assert paper_worse > 0


@pytest.mark.parametrize("rule", [*OMGS_RULES.values(), no_merge, single_group])
def test_every_plan_covers_the_layers_with_contiguous_groups(rule):
    layers, cost = _random_instance(random.Random(3), 40)
    plan = rule(layers, cost)
    covered = [i for group in groups_of(plan) for i in group]
    assert covered == list(range(40))
    times = timeline(plan, layers, cost)
    spans = [t.select_start - t.backward_start for t in times]
    assert sum(spans) == pytest.approx(sum(layers.backward))  # merging keeps Σtb


def test_optimal_is_fast_for_hundreds_of_tensors():
    layers, cost = _random_instance(random.Random(5), 300)
    plan = optimal_plan(layers, cost)  # seconds, not hours; timing itself is a benchmark
    assert sum(plan) == 300
    assert iteration_seconds(plan, layers, cost) <= iteration_seconds(
        safe_rule(layers, cost), layers, cost
    )


def test_least_squares_recover_the_cost_model():
    sizes = [2**k for k in range(10, 21)]
    gamma = 3e-10
    seconds = [gamma * 0.01 * d * math.log2(d) for d in sizes]
    assert fit_gamma(sizes, seconds, density=0.01) == pytest.approx(gamma)
    nbytes = [1e3 * 2**k for k in range(10)]
    alpha, beta = fit_alpha_beta(nbytes, [2e-4 + 8e-9 * b for b in nbytes])
    assert (alpha, beta) == (pytest.approx(2e-4), pytest.approx(8e-9))
    noisy = [2e-4 + 8e-9 * b + (1e-5 if i % 2 else -1e-5) for i, b in enumerate(nbytes)]
    alpha, beta = fit_alpha_beta(nbytes, noisy)
    assert alpha == pytest.approx(2e-4, rel=0.1) and beta == pytest.approx(8e-9, rel=0.01)
    with pytest.raises(ValueError, match="two different sizes"):
        fit_alpha_beta([1e3, 1e3], [1.0, 2.0])


def test_the_engines_work_per_group_is_fitted_beside_the_top_k_slope():
    sizes = [2**k for k in range(6, 21)]
    gamma, delta = 3e-10, 2e-4
    seconds = [delta + gamma * 0.01 * d * math.log2(d) for d in sizes]
    assert fit_gamma_delta(sizes, seconds, density=0.01) == (
        pytest.approx(gamma),
        pytest.approx(delta),
    )
    # Without a fixed part the fit is TKPM's alone; time that does not grow is all fixed.
    through_origin = [gamma * 0.01 * d * math.log2(d) - 1e-6 for d in sizes]
    assert fit_gamma_delta(sizes, through_origin, density=0.01)[1] == 0.0
    assert fit_gamma_delta(sizes, [5e-4 - 1e-12 * d for d in sizes], density=0.01) == (
        0.0,
        pytest.approx(5e-4, rel=1e-3),
    )
    with pytest.raises(ValueError, match="two different sizes"):
        fit_gamma_delta([64, 64], [1.0, 2.0], density=0.01)


def test_a_groups_fixed_cost_on_the_compute_stream_makes_fewer_groups_pay():
    # Twelve layers whose exchanges hide behind backward when each is its own group, until
    # every group also costs the engine δ on the compute stream: then merging wins.
    layers = Layers(backward=(0.01,) * 12, sizes=(4096,) * 12)
    free = CostModel(gamma=1e-9, alpha=1e-3, beta=1e-9, density=0.01)
    costly = CostModel(gamma=1e-9, alpha=1e-3, beta=1e-9, density=0.01, delta=0.02)
    plan = no_merge(layers)
    added = iteration_seconds(plan, layers, costly) - iteration_seconds(plan, layers, free)
    assert added == pytest.approx(12 * 0.02)  # every group's δ lies on the critical path
    assert len(optimal_plan(layers, costly)) < len(optimal_plan(layers, free))
    assert optimal_plan(layers, costly) == brute_force_plan(layers, costly)


def test_exchanges_after_the_busy_share_of_the_compute_stream_get_the_idle_price():
    # LAGS on three layers: a cheaper start-up once the cores are idle. With the whole stream
    # busy only the exchanges after it get it; with none of it, every one does (as if ``cost``
    # were the idle price); a share between lies between.
    cost, idle = _cost(alpha=0.05), _cost(alpha=0.01)
    plan = no_merge(THREE)

    def seconds(share: float) -> float:
        return iteration_seconds(plan, THREE, cost, after=idle, after_share=share)

    assert seconds(1.0) == pytest.approx(iteration_seconds(plan, THREE, cost, after=idle))
    assert seconds(0.0) == pytest.approx(iteration_seconds(plan, THREE, idle))
    assert seconds(0.0) < seconds(0.5) <= seconds(1.0) < iteration_seconds(plan, THREE, cost)


def test_the_rules_the_config_offers_are_the_rules_there_are():
    """``scheduler.rule`` is checked (torch- and numpy-free) against the names the OMGS options
    list; every one must name a planner, and every planner must be offered."""
    from gradsync.schedulers.pipelined.config import OMGS_RULE_NAMES

    assert set(OMGS_RULE_NAMES) == set(OMGS_RULES)
