"""DeFT's two-queue state machine (SPECS §7.3) and its invariants (§7.7.3-4)."""

from __future__ import annotations

import math
import random

import pytest

from gradsync.sync.deft_queues import DeftQueues


def _run(queues: DeftQueues, iterations: int) -> tuple[dict, list[list[int]]]:
    """Every gradient's sent buckets (by its iterations) and every update, in order."""
    sent: dict[tuple[int, ...], list[int]] = {}
    updates: list[list[int]] = []
    for _ in range(iterations):
        before = queues.current
        step = queues.step()
        if before is not None:
            key = tuple(before.iterations)
            sent.setdefault(key, []).extend([*step.forward_sends, *step.backward_sends_current])
        if queues.current is not before and queues.current is not None:
            sent.setdefault(tuple(queues.current.iterations), []).extend(step.backward_sends_new)
        if step.applied is not None:
            updates.append(step.applied)
    return sent, updates


@pytest.mark.parametrize("seed", range(20))
def test_every_bucket_of_every_gradient_is_sent_once_and_applied_once(seed):
    rng = random.Random(seed)
    buckets = rng.randint(2, 7)
    queues = DeftQueues(
        comm=[rng.uniform(1e-3, 20e-3) for _ in range(buckets)],
        backward=[rng.uniform(1e-3, 10e-3) for _ in range(buckets)],
        forward_time=rng.uniform(5e-3, 30e-3),
        backward_time=rng.uniform(10e-3, 60e-3),
    )
    iterations = 40
    sent, updates = _run(queues, iterations)
    applied = [i for update in updates for i in update]
    assert applied == sorted(set(applied))  # each iteration in one update, in order
    pending = [*(queues.current.iterations if queues.current else []), *queues.future]
    assert sorted(applied + pending) == list(range(iterations))  # Σk = iterations − pending
    for update in updates:
        assert sorted(sent[tuple(update)]) == list(range(buckets))  # whole, each bucket once
    for buckets_sent in sent.values():
        assert len(buckets_sent) == len(set(buckets_sent))  # never sent twice


def test_the_input_side_bucket_is_never_sent_during_backward_of_its_own_gradient():
    queues = DeftQueues(comm=[1e-3] * 4, backward=[1e-3] * 4, forward_time=1.0, backward_time=1.0)
    for _ in range(10):
        step = queues.step()
        assert 3 not in step.backward_sends_new


def test_unlimited_capacity_is_one_update_per_iteration_one_iteration_late():
    queues = DeftQueues(
        comm=[5e-3] * 5, backward=[1e-3] * 5, forward_time=math.inf, backward_time=math.inf
    )
    steps = [queues.step() for _ in range(6)]
    assert steps[0].applied is None
    assert [s.applied for s in steps[1:]] == [[0], [1], [2], [3], [4]]
    assert all(s.forward_sends == [4] for s in steps[1:])  # the input side, during forward


def test_without_delay_it_is_wfbp():
    queues = DeftQueues(comm=[5e-3] * 3, backward=[1e-3] * 3, forward_time=0.0,
                        backward_time=0.0, delay=False)  # fmt: skip
    steps = [queues.step() for _ in range(3)]
    assert [s.applied for s in steps] == [[0], [1], [2]]
    assert all(s.backward_sends_new == [0, 1, 2] for s in steps)


def test_slow_links_merge_iterations():
    # Communication takes far longer than computation: gradients pile up in FUT.
    queues = DeftQueues(comm=[50e-3] * 3, backward=[1e-3] * 3, forward_time=20e-3,
                        backward_time=60e-3)  # fmt: skip
    _, updates = _run(queues, 30)
    assert any(len(update) > 1 for update in updates)
