"""The iteration simulator (SPECS §7.5 [R]) on hand-computed and random cases."""

from __future__ import annotations

import random

import pytest

from gradsync.sync.simulator import BucketTimes, bytescheduler, coverage_rate, deft, wfbp

TWO = dict(forward=(1.0, 1.0), backward=(1.0, 1.0))


def test_wfbp_hides_what_fits_behind_backward():
    free = wfbp(BucketTimes(**TWO, comm=(0.0, 0.0)))
    assert free.iteration == pytest.approx(4.0) and free.bubble_ratio == 0.0
    # Bucket 0 ready at 3 goes until 3.5; bucket 1 ready at 4 until 4.5: the next forward waits.
    some = wfbp(BucketTimes(**TWO, comm=(0.5, 0.5)))
    assert some.iteration == pytest.approx(4.5)
    assert some.bubble_ratio == pytest.approx(1 - 4 / 4.5)
    assert some.update_frequency == 1.0


def test_comm_bound_wfbp_is_forward_first_backward_and_all_communication():
    bound = wfbp(BucketTimes(**TWO, comm=(3.0, 3.0)))
    assert bound.iteration == pytest.approx(2 + 1 + 6)  # ΣF + B_0 + ΣC


def test_bytescheduler_overlaps_communication_with_the_next_forward():
    rng = random.Random(0)
    for _ in range(50):
        n = rng.randint(1, 6)
        times = BucketTimes(
            forward=tuple(rng.uniform(0.1, 1) for _ in range(n)),
            backward=tuple(rng.uniform(0.1, 1) for _ in range(n)),
            comm=tuple(rng.uniform(0.1, 3) for _ in range(n)),
        )
        assert bytescheduler(times).iteration <= wfbp(times).iteration * (1 + 1e-9)
        assert bytescheduler(times).update_frequency == 1.0


def test_deft_matches_compute_time_when_communication_is_small():
    small = deft(BucketTimes(**TWO, comm=(0.1, 0.1)))
    assert small.iteration == pytest.approx(4.0)
    assert small.update_frequency == pytest.approx(1.0)
    assert small.bubble_ratio == pytest.approx(0.0)


def test_deft_trades_update_frequency_for_iteration_time_when_links_are_slow():
    times = BucketTimes(
        forward=(0.3, 0.3, 0.3, 0.3),
        backward=(0.6, 0.6, 0.6, 0.6),
        comm=(1.0, 1.0, 1.0, 1.0),
    )
    assert coverage_rate(times) == pytest.approx(4 / 3.6)
    delayed, baseline = deft(times, iterations=40), wfbp(times, iterations=40)
    assert delayed.iteration < baseline.iteration
    assert delayed.update_frequency < 1.0
