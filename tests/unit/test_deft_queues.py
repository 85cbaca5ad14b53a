"""DeFT's two-queue state machine and what it guarantees (docs/methods/schedulers/deft.md,
"The two queues", "Two links" and "What the tests check")."""

from __future__ import annotations

import math
import random

import pytest

from gradsync.algorithms import deft_queues
from gradsync.algorithms.deft_queues import DeftQueues, Step, steady_period, update_sizes


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


def _random_options(rng: random.Random) -> dict:
    buckets = rng.randint(2, 7)
    return dict(
        comm=[rng.uniform(1e-3, 20e-3) for _ in range(buckets)],
        backward=[rng.uniform(1e-3, 10e-3) for _ in range(buckets)],
        forward_time=rng.uniform(5e-3, 30e-3),
        backward_time=rng.uniform(10e-3, 60e-3),
    )


@pytest.mark.parametrize("seed", range(20))
def test_two_links_send_every_bucket_once_each_on_one_link_within_its_window(seed):
    rng = random.Random(seed)
    options = _random_options(rng)
    options.update(mu=rng.uniform(1.2, 3.0), capacity_scale=rng.choice([1, 1.5]))
    queues, checked = DeftQueues(**options), DeftQueues(**options)
    scale, mu, comm = queues.capacity_scale, queues.mu, queues.comm
    forward_window = queues.forward_time * scale
    backward_window = queues.backward_time * scale

    def seconds(buckets):
        return sum(comm[b] for b in buckets)

    iterations = 40
    for _ in range(iterations):
        step = checked.step()
        assert not set(step.forward_sends) & set(step.backward_sends_current)
        # The slow share is a part of what is listed; new-gradient buckets go on the fast link.
        assert step.slow <= set(step.forward_sends) | set(step.backward_sends_current)
        fast_forward = [b for b in step.forward_sends if b not in step.slow]
        slow_forward = [b for b in step.forward_sends if b in step.slow]
        fast_backward = [b for b in step.backward_sends_current if b not in step.slow]
        slow_backward = [b for b in step.backward_sends_current if b in step.slow]
        assert seconds(fast_forward) <= forward_window + 1e-12
        # The slow sack holds window/μ (docs/methods/schedulers/deft.md, "Two links").
        assert mu * seconds(slow_forward) <= forward_window + 1e-12
        assert mu * seconds(slow_backward) <= backward_window + 1e-12
        # The new gradient gets what the fast link has left of the backward window, unless no
        # bucket fit anywhere and the cheapest one left was sent anyway.
        used = seconds(fast_backward) + seconds(step.backward_sends_new)
        if not step.forward_sends and len(fast_backward) == 1 and used > backward_window:
            assert not step.backward_sends_new  # nothing left for the new gradient
        else:
            assert used <= backward_window + 1e-12
    # And conservation, as with one link.
    sent, updates = _run(queues, iterations)
    applied = [i for update in updates for i in update]
    assert applied == sorted(set(applied))
    pending = [*(queues.current.iterations if queues.current else []), *queues.future]
    assert sorted(applied + pending) == list(range(iterations))
    for update in updates:
        assert sorted(sent[tuple(update)]) == list(range(len(comm)))
    for buckets_sent in sent.values():
        assert len(buckets_sent) == len(set(buckets_sent))


def test_a_second_link_sends_in_the_forward_pass_what_one_link_cannot():
    times = dict(comm=[2.0] * 3, backward=[1.0] * 3, forward_time=3.0, backward_time=3.0)
    two, one = DeftQueues(**times, mu=1.5), DeftQueues(**times)
    # t = 0: RecursiveKnapsack of bucket 0, 1 (each 2) in 3 − B_0 = 2: bucket 0.
    assert two.step() == one.step() == Step([], [], [0], None, renewed=True)
    # t = 1: buckets 1 and 2 of gradient 0 are left; the slow sack holds 3 / 1.5 = 2 of
    # fast-link time: bucket 1 there, bucket 2 on the fast link, and gradient 0 is complete.
    assert two.step() == Step([1, 2], [], [0], [0], renewed=True, slow=frozenset({1}))
    # One link fits one of them in the forward pass, the other in backward (Case 3), which
    # leaves 1 of the backward window: too little for any bucket of gradient 1.
    assert one.step() == Step([1], [2], [], [0], renewed=True)
    assert [len(two.step().applied or []) for _ in range(6)] == [1] * 6  # every iteration
    assert any(one.step().applied is None for _ in range(6))  # one link falls behind


@pytest.mark.parametrize("mu", [None, 1.65])
def test_a_large_capacity_scale_is_one_update_per_iteration_one_iteration_late(mu):
    queues = DeftQueues(comm=[5e-3] * 5, backward=[1e-3] * 5, forward_time=1e-3,
                        backward_time=5e-3, mu=mu, capacity_scale=1e4)  # fmt: skip
    steps = [queues.step() for _ in range(6)]
    assert steps[0].applied is None
    assert [s.applied for s in steps[1:]] == [[0], [1], [2], [3], [4]]
    assert all(s.backward_sends_new == [0, 1, 2, 3] for s in steps)
    # At scale 1 the same times cannot keep up: 25 ms of sends against 6 ms of compute.
    plain = DeftQueues(comm=[5e-3] * 5, backward=[1e-3] * 5, forward_time=1e-3,
                       backward_time=5e-3, mu=mu)  # fmt: skip
    assert update_sizes(plain, 20) != [1] * 19


def test_capacity_scale_and_mu_are_checked():
    with pytest.raises(ValueError, match="capacity_scale"):
        DeftQueues(comm=[1.0], backward=[1.0], forward_time=1, backward_time=1, capacity_scale=0)
    with pytest.raises(ValueError, match="mu"):
        DeftQueues(comm=[1.0], backward=[1.0], forward_time=1, backward_time=1, mu=0)


@pytest.mark.parametrize("seed", range(10))
def test_update_sizes_are_the_merged_iterations_of_the_updates_and_leave_the_queues(seed):
    rng = random.Random(seed)
    queues = DeftQueues(**_random_options(rng), mu=rng.choice([None, 1.65]))
    for _ in range(rng.randint(0, 5)):  # from any state, not only a fresh one
        queues.step()
    start, current = queues.iteration, queues.current
    unsent = set(current.unsent) if current else None
    sizes = update_sizes(queues, 30)
    assert queues.iteration == start and queues.current is current  # left as it was
    assert (set(current.unsent) if current else None) == unsent
    _, updates = _run(queues, 30)  # the same steps, for real
    assert sizes == [len(update) for update in updates]
    assert all(k >= 1 for k in sizes)
    pending = [*(queues.current.iterations if queues.current else []), *queues.future]
    first_applied = updates[0][0] if updates else queues.iteration
    # Σk = the iterations applied: all from the first one applied up to what is still pending.
    assert sum(sizes) == queues.iteration - first_applied - len(pending)


def test_update_sizes_of_a_fresh_run_add_up_to_the_iterations_completed():
    queues = DeftQueues(comm=[50e-3] * 3, backward=[1e-3] * 3, forward_time=20e-3,
                        backward_time=60e-3)  # fmt: skip
    sizes = update_sizes(queues, 40)
    assert max(sizes) > 1  # merged updates: the Preserver's variable batch sizes
    _run(queues, 40)
    pending = [*queues.current.iterations, *queues.future]
    assert sum(sizes) == 40 - len(pending)
    assert update_sizes(DeftQueues(comm=[1.0], backward=[1.0], forward_time=1.0,
                                   backward_time=1.0, delay=False), 5) == [1] * 5  # fmt: skip


def test_knapsacks_are_solved_once_per_candidates_and_window(monkeypatch):
    calls = []
    solve = deft_queues.naive_knapsack

    def counted(*args, **kwargs):
        calls.append(args)
        return solve(*args, **kwargs)

    monkeypatch.setattr(deft_queues, "naive_knapsack", counted)
    options = dict(comm=[9e-3, 7e-3, 5e-3, 8e-3], backward=[2e-3] * 4, forward_time=10e-3,
                   backward_time=8e-3)  # fmt: skip
    memoized, fresh = DeftQueues(**options), DeftQueues(**options)
    for _ in range(200):
        fresh._memo.clear()
        assert memoized.step() == fresh.step()  # the same schedule as solving every time
    solved_fresh = len(calls)
    calls.clear()
    for _ in range(200):
        memoized.step()
    assert solved_fresh > 200 and not calls  # the periodic schedule is all remembered


def test_a_bucket_too_long_for_every_window_is_sent_anyway_so_updates_go_on():
    # Bucket 1 takes 5 s, the forward and backward windows 1 s each.
    queues = DeftQueues(comm=[0.1, 5.0, 0.1], backward=[0.3] * 3, forward_time=1.0,
                        backward_time=1.0)  # fmt: skip
    steps = [queues.step() for _ in range(8)]
    assert any(1 in s.backward_sends_current for s in steps)
    assert sum(s.applied is not None for s in steps) >= 2


def test_the_same_buckets_in_a_different_window_are_solved_again():
    # t = 0 sends bucket 0 (RecursiveKnapsack in 12 − 6); at t = 1 buckets 1 and 2 fit none
    # of the 1 s forward window but both of the 12 s backward one.
    queues = DeftQueues(comm=[5.0] * 3, backward=[6.0, 5.0, 1.0], forward_time=1.0,
                        backward_time=12.0)  # fmt: skip
    assert queues.step().backward_sends_new == [0]
    assert queues.step() == Step([], [1, 2], [], [0], renewed=True)


def test_the_steady_period_of_a_schedule_is_its_repeating_run_of_updates():
    unlimited = DeftQueues(comm=[1e-6] * 3, backward=[1.0] * 3, forward_time=3.0, backward_time=3.0)
    assert steady_period(unlimited) == ([1], 1)  # one update per iteration
    tight = DeftQueues(comm=[2.0] * 3, backward=[1.0] * 3, forward_time=3.0, backward_time=3.0)
    merged, iterations = steady_period(tight)
    assert merged and sum(merged) == iterations and max(merged) > 1
    full = update_sizes(tight, 60)
    assert full[-len(merged) :] == merged or full[-2 * len(merged) : -len(merged)] == merged
