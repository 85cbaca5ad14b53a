"""The iteration simulator (docs/methods/index.md, "Bucketed schedules: a discrete-event
simulator") on hand-computed and random cases."""

from __future__ import annotations

import functools
import itertools
import random

import pytest

from gradsync.algorithms.simulator import (
    COMPUTE,
    LINK_1,
    LINK_2,
    PAPER_MU,
    Block,
    BucketTimes,
    Event,
    busy_links_key,
    bytescheduler,
    contended,
    coverage_rate,
    deft,
    usbyte,
    usbyte_partitions,
    wfbp,
)

TWO = dict(forward=(1.0, 1.0), backward=(1.0, 1.0))
SCHEDULES = {  # every schedule of the simulator, with its defaults
    "wfbp": wfbp,
    "bytescheduler": bytescheduler,
    "usbyte": usbyte,
    "deft": deft,
    "deft-2links": functools.partial(deft, mu=PAPER_MU),
}


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


def test_deft_steps_wait_for_the_sends_they_started_as_the_engine_does():
    # Planned at 1 s a bucket, the queues settle into three steps that repeat: (a) bucket 0 in
    # forward, 2 and 3 in backward; (b) 0 in forward, 1 and 2 in backward, no update; (c) 3
    # in forward, the new gradient's bucket 1 sent once ready and left in flight. Each send
    # takes 1.5 s. From a start at 0 with the link free: (a) forward ends at 1.2, the link is
    # busy until 4.5 and backward ends at 3.6: the step waits until 4.5. (b) the same: 4.5.
    # (c) bucket 3 ends at 1.5, backward at 3.6, the carried bucket 1 (ready at 2.4) ends at
    # 3.9, so the next (a) starts its sends at 3.9: 0.3 later, and ends at 4.8. Three steps
    # take 4.8 + 4.5 + 3.6 = 12.9 s. (Not waiting in (b), which applies nothing, gives 12.)
    planned = BucketTimes(forward=(0.3,) * 4, backward=(0.6,) * 4, comm=(1.0,) * 4)
    times = BucketTimes(forward=(0.3,) * 4, backward=(0.6,) * 4, comm=(1.5,) * 4)
    late = deft(times, iterations=60, planned=planned)
    assert late.update_frequency == pytest.approx(2 / 3)
    assert late.iteration == pytest.approx(12.9 / 3)


def test_deft_sends_go_on_while_the_workers_step_and_load_the_next_batch():
    # Each step sends bucket 1 of the gradient in flight when forward ends (1 to 9) and the new
    # gradient's bucket 0 once ready (6), which the next step waits for: the link is the
    # bound, 16 s an iteration, against 11 of compute. Up to 5 s of stepping and loading
    # costs nothing; past that it adds up.
    times = BucketTimes(forward=(0.5, 0.5), backward=(5.0, 5.0), comm=(8.0, 8.0))
    planned = BucketTimes(forward=(0.5, 0.5), backward=(5.0, 5.0), comm=(5.0, 5.0))
    assert deft(times, iterations=40, planned=planned).iteration == pytest.approx(16.0)
    hidden = deft(times, iterations=40, planned=planned, between=3.0, update=1.0)
    assert hidden.iteration == pytest.approx(16.0)
    longer = deft(times, iterations=40, planned=planned, between=7.0, update=1.0)
    assert longer.iteration == pytest.approx(11.0 + 1.0 + 7.0)
    # Compute-bound with cheap sends: stepping and loading add up, as everywhere.
    small = deft(BucketTimes(**TWO, comm=(0.1, 0.1)), between=0.5, update=0.25)
    assert small.iteration == pytest.approx(4.0 + 0.5 + 0.25)
    assert small.bubble_ratio == pytest.approx(0.0)


def _random_times(rng: random.Random, comm_scale: float = 1.0) -> BucketTimes:
    n = rng.randint(1, 7)
    return BucketTimes(
        forward=tuple(rng.uniform(0.1, 1) for _ in range(n)),
        backward=tuple(rng.uniform(0.1, 1) for _ in range(n)),
        comm=tuple(comm_scale * rng.uniform(0.1, 3) for _ in range(n)),
    )


def test_every_schedule_is_pure_compute_when_communication_is_free():
    rng = random.Random(3)
    for _ in range(20):
        times = _random_times(rng, comm_scale=0.0)
        for name, schedule in SCHEDULES.items():
            predicted = schedule(times)
            assert predicted.iteration == pytest.approx(times.compute), name
            assert predicted.bubble_ratio == pytest.approx(0.0, abs=1e-9), name
            assert predicted.update_frequency == pytest.approx(1.0), name


def test_one_link_schedules_cannot_beat_the_link_when_communication_dominates():
    rng = random.Random(4)
    for _ in range(20):
        times = _random_times(rng, comm_scale=100.0)
        total = sum(times.comm)
        for schedule in (wfbp, bytescheduler, usbyte):
            assert schedule(times).iteration >= total * (1 - 1e-9)
        # DeFT sends every gradient once, merged or not: its updates need the link's time.
        for mu, links in ((None, 1.0), (1.65, 1 + 1 / 1.65)):
            predicted = deft(times, 40, mu=mu)
            assert predicted.update_frequency * total <= predicted.iteration * links * 1.02


def test_usbyte_is_never_slower_than_bytescheduler_or_wfbp():
    rng = random.Random(5)
    for _ in range(40):
        times = _random_times(rng, comm_scale=rng.choice([0.1, 1.0, 10.0]))
        alpha = rng.uniform(0, 0.3)
        chosen = usbyte(times, alpha=alpha)
        # ByteScheduler's equal pieces are one of the partitions US-Byte chooses from.
        assert chosen.iteration <= bytescheduler(times, alpha=alpha).iteration * (1 + 1e-9)
        assert chosen.iteration <= wfbp(times).iteration * (1 + 1e-9)
        assert chosen.update_frequency == 1.0


def test_usbyte_merges_small_buckets_when_start_ups_dominate():
    # Four buckets of 1 s each, 0.9 s of which is the start-up α: one message of 0.9 + 4 × 0.1
    # once backward ends (at 0.8) lets the next forward start at 2.1. WFBP sends the four in a
    # row from 0.5 to 4.5; ByteScheduler's 16 pieces pay α 16 times.
    tenth = (0.1,) * 4
    times = BucketTimes(forward=tenth, backward=tenth, comm=(1.0,) * 4)
    assert usbyte(times, alpha=0.9).iteration == pytest.approx(2.1)
    assert wfbp(times).iteration == pytest.approx(4.5)
    assert bytescheduler(times, alpha=0.9).iteration > 10 * 0.9


def test_usbyte_partitions_cover_the_gradient_with_unequal_messages():
    times = BucketTimes(forward=(1.0,) * 3, backward=(1.0,) * 3, comm=(0.6, 0.6, 2.5))
    candidates = usbyte_partitions(times, alpha=0.1)
    for blocks in candidates:
        covered = [b for block in blocks for b in range(block.first, block.last + 1)]
        assert sorted(set(covered)) == [0, 1, 2]
        assert all(x.last <= y.first for x, y in itertools.pairwise(blocks))  # in order
        bandwidth = sum(block.seconds - 0.1 for block in blocks)
        assert bandwidth == pytest.approx(sum(times.comm) - 3 * 0.1)  # nothing lost or added
    # A cap of half the bandwidth term (1.7): buckets 0 and 1 (0.5 each) merged, bucket 2
    # (2.4) in two pieces of 1.2, each message paying α once.
    halves = [Block(0, 1, 1.1), Block(2, 2, 1.3), Block(2, 2, 1.3)]
    assert any(blocks == pytest.approx(halves) for blocks in candidates if len(blocks) == 3)
    assert [Block(0, 2, 3.5)] in candidates  # the whole gradient as one message


def test_two_links_keep_deft_applying_every_iteration_where_one_link_merges():
    # Three 2 s buckets, 1 s of forward and of backward each: with a second link (μ = 1.5)
    # the forward pass carries the two buckets left of the last gradient, so every iteration
    # applies one; one link needs two iterations for some gradients.
    times = BucketTimes(forward=(1.0,) * 3, backward=(1.0,) * 3, comm=(2.0,) * 3)
    one, two = deft(times, 40), deft(times, 40, mu=1.5)
    assert one.iteration == pytest.approx(6.0) and two.iteration == pytest.approx(6.0)
    assert two.update_frequency == pytest.approx(1.0)
    assert one.update_frequency < 0.9
    slow = [e for e in two.timeline if e.stream == LINK_2]
    assert [e.label for e in slow] == ["C1 t-1"]  # bucket 1 of the previous gradient
    assert slow[0].end - slow[0].start == pytest.approx(1.5 * 2.0)  # μ·c on the slow link
    assert not [e for e in one.timeline if e.stream == LINK_2]


def test_the_wfbp_timeline_is_the_hand_computed_iteration():
    predicted = wfbp(BucketTimes(**TWO, comm=(0.5, 0.5)))
    assert predicted.timeline == (
        Event(COMPUTE, 0.0, 1.0, "F1"),
        Event(COMPUTE, 1.0, 2.0, "F0"),
        Event(COMPUTE, 2.0, 3.0, "B0"),
        Event(COMPUTE, 3.0, 4.0, "B1"),
        Event(LINK_1, 3.0, 3.5, "C0"),
        Event(LINK_1, 4.0, 4.5, "C1"),
    )


def test_timelines_hold_one_iteration_of_compute_and_never_overlap_on_a_stream():
    rng = random.Random(6)
    for _ in range(15):
        times = _random_times(rng, comm_scale=rng.choice([0.3, 1.0, 3.0]))
        n = len(times.comm)
        for name, schedule in SCHEDULES.items():
            predicted = schedule(times)
            events, span = predicted.timeline, predicted.timeline_span
            assert all(0 <= e.start < e.end <= span * (1 + 1e-9) for e in events)
            compute = [e for e in events if e.stream == COMPUTE]
            assert sorted(e.label for e in compute) == sorted(
                [f"F{b}" for b in range(n)] + [f"B{b}" for b in range(n)]
            ), name
            for stream in (COMPUTE, LINK_1, LINK_2):
                lane = sorted((e for e in events if e.stream == stream), key=lambda e: e.start)
                assert all(a.end <= b.start + 1e-9 for a, b in itertools.pairwise(lane)), name
            assert sum(e.end - e.start for e in compute) == pytest.approx(times.compute)
            if not name.startswith("deft"):  # the others repeat every iteration
                assert span == pytest.approx(predicted.iteration)


def test_compute_slows_while_its_link_is_busy():
    times = BucketTimes(**TWO, comm=(0.5, 0.5))
    # Bucket 0's send (from 3) overlaps bucket 1's backward: at half speed for that 0.5 s,
    # the backward ends at 4.25 instead of 4, and bucket 1's send at 4.75.
    slowed = contended(wfbp, times, {LINK_1: 2.0})
    assert slowed.iteration == pytest.approx(4.75, rel=1e-3)
    assert contended(wfbp, times, {}).iteration == wfbp(times).iteration == pytest.approx(4.5)
    assert contended(wfbp, times, {LINK_2: 2.0}).iteration == pytest.approx(4.5)  # idle link
    # Sends that never overlap compute (each bucket after the whole backward) cost nothing.
    after = BucketTimes(forward=(1.0,), backward=(1.0,), comm=(0.5,))
    assert contended(wfbp, after, {LINK_1: 3.0}).iteration == pytest.approx(2.5)


def _full_speed_work(prediction, slowdown):
    """Seconds of full-speed forward and backward work the timeline's compute does, given
    which links are busy at every moment."""
    links = [e for e in prediction.timeline if e.stream != COMPUTE]
    work = {"F": 0.0, "B": 0.0}
    for event in (e for e in prediction.timeline if e.stream == COMPUTE):
        cuts = sorted({event.start, event.end, *(t for e in links for t in (e.start, e.end))})
        for a, b in itertools.pairwise(t for t in cuts if event.start <= t <= event.end):
            busy = {e.stream for e in links if e.start < b and e.end > a}
            work[event.label[0]] += (b - a) / (
                slowdown.get(busy_links_key(busy), 1.0) if busy else 1.0
            )
    return work


@pytest.mark.parametrize("name", ["wfbp", "bytescheduler", "deft", "deft-2links"])
def test_the_slowed_timeline_does_exactly_the_profiled_work(name):
    rng = random.Random(7)
    slowdown = {LINK_1: 1.3, LINK_2: 1.2, busy_links_key([LINK_1, LINK_2]): 1.6}
    for _ in range(10):
        times = _random_times(rng, comm_scale=0.5)
        plain = SCHEDULES[name](times)
        slowed = contended(SCHEDULES[name], times, slowdown)
        work = _full_speed_work(slowed, slowdown)
        assert work["F"] == pytest.approx(sum(times.forward), rel=0.01)
        assert work["B"] == pytest.approx(sum(times.backward), rel=0.01)
        assert plain.iteration - 1e-9 <= slowed.iteration <= plain.iteration * 1.6 + 1e-9
