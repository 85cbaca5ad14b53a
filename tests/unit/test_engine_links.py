"""Engine pieces a bucket scheduler builds on, on the CPU: all-reduces issued from the one
communication thread without holding it (two links busy at once, issued in a fixed order), and
error-feedback residuals carried over when the buckets change."""

from __future__ import annotations

import threading

import torch

from gradsync.feedback.residual import ResidualFeedback
from gradsync.schedulers.engine.buckets import Buckets
from gradsync.schedulers.engine.comm_thread import THREAD_NAME, CommThread
from gradsync.schedulers.engine.queued_collective import QueuedCollective
from gradsync.schedulers.engine.residuals import bucket_name, rebucket_residuals
from gradsync.schedulers.engine.step_timer import StepTimer

CPU = torch.device("cpu")


class _SlowLink:
    """A link whose all-reduces complete only when the test lets them."""

    rank, world_size = 0, 1

    def __init__(self, name: str, issued: list[tuple[str, str]], done: threading.Event) -> None:
        self.name, self.issued, self.done = name, issued, done

    def start_all_reduce(self, payload, *, op="sum"):
        self.issued.append((self.name, threading.current_thread().name))

        def finish():
            assert self.done.wait(5), "never completed"
            return payload

        return finish


def test_issued_all_reduces_leave_the_thread_free_so_both_links_are_busy_at_once():
    comm, timer, done = CommThread(CPU), StepTimer(CPU), threading.Event()
    issued: list[tuple[str, str]] = []
    first, second = (
        QueuedCollective(_SlowLink(name, issued, done), comm, timer) for name in ("a", "b")
    )
    finishes = [link.issue_all_reduce((torch.ones(2),)) for link in (first, second, first)]
    # Every start was issued, in order, by the communication thread before any completed.
    assert comm.submit(lambda: list(issued)).wait() == [
        ("a", THREAD_NAME),
        ("b", THREAD_NAME),
        ("a", THREAD_NAME),
    ]
    done.set()
    assert all(torch.equal(finish()[0], torch.ones(2)) for finish in finishes)
    comm.close()


def test_residuals_follow_their_elements_into_new_buckets():
    feedback = ResidualFeedback()
    old, new = Buckets((0, 3, 5)), Buckets((0, 2, 4, 5))
    feedback.load_state_dict({bucket_name(0): torch.tensor([1.0, 2.0, 3.0])})  # bucket 1: none
    rebucket_residuals(feedback, old, new, like=torch.zeros(1))
    state = feedback.state_dict()
    assert sorted(state) == [bucket_name(b) for b in range(3)]
    assert torch.equal(
        torch.cat([state[bucket_name(b)] for b in range(3)]),
        torch.tensor([1.0, 2.0, 3.0, 0.0, 0.0]),
    )
