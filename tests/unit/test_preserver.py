"""DeFT's Preserver (docs/methods/schedulers/deft.md, "The Preserver" and "What the tests
check")."""

from __future__ import annotations

import pytest

from gradsync.algorithms.preserver import LossWalk, passes, preserve, preserver_ratio

WALK = LossWalk(mu=4.0, sigma=30.0, eta=0.01, floor=0.0)


@pytest.mark.parametrize(("loss", "batch"), [(2.3, 32), (0.5, 256), (0.05, 8), (1.0, 1)])
def test_one_update_is_the_mean_of_a_folded_normal(loss, batch):
    # E_B[s'] = E|X| + S* for X ~ N(s − S* − ημ, η²σ²/B): scipy's folded normal as reference
    # (scipy is optional: the module collects without it).
    foldnorm = pytest.importorskip("scipy.stats").foldnorm
    drift = loss - WALK.floor - WALK.eta * WALK.mu
    spread = WALK.eta * WALK.sigma / batch**0.5
    reference = foldnorm.mean(abs(drift) / spread, scale=spread) + WALK.floor
    assert WALK.expected_after(loss, batch) == pytest.approx(reference, rel=1e-9)


def test_expected_loss_falls_with_the_batch_size_while_above_the_floor():
    losses = [WALK.expected_after(2.0, b) for b in (8, 32, 128, 512)]
    assert losses == sorted(losses, reverse=True)


def test_a_schedule_without_delays_has_ratio_one():
    assert preserver_ratio(WALK, 2.0, [1, 1, 1, 1], 64) == 1.0
    assert passes(1.0)


def test_merging_iterations_moves_the_ratio_away_from_one():
    ratio = preserver_ratio(WALK, 2.0, [2, 2], 64)  # two updates of 2B instead of four of B
    assert ratio < 1.0  # fewer updates: a higher expected loss after the period
    assert preserver_ratio(WALK, 2.0, [4], 64) < ratio


def test_capacities_grow_until_the_schedule_passes():
    scales = []

    def schedule_for(scale: float) -> tuple[list[int], int]:
        scales.append(scale)
        return ([1, 1, 1, 1] if scale > 1.3 else [4]), 4

    decision = preserve(schedule_for, WALK, 2.0, 64)
    assert decision.passed and decision.ratio == 1.0
    assert decision.retries == 3 and decision.capacity_scale == pytest.approx(1.1**3)
    assert scales == pytest.approx([1.0, 1.1, 1.21, 1.331])


def test_the_preserver_gives_up_after_ten_retries():
    decision = preserve(lambda scale: ([4], 4), WALK, 2.0, 64)
    assert not decision.passed and decision.retries == 10


def test_iterations_left_unapplied_at_the_end_of_the_period_count_against_the_schedule():
    complete = preserver_ratio(WALK, 2.0, [2, 2], 32)
    held_back = preserver_ratio(WALK, 2.0, [2, 2], 32, iterations=8)  # 4 still pending
    assert held_back < complete
    assert not passes(preserver_ratio(WALK, 2.0, [], 32, iterations=20))  # never applies
