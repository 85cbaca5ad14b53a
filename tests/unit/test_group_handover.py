"""What a pipelined group costs the training thread: its jobs' events are made once and used
again, a job that submits another runs it inside itself, and a compressor that talks while it
compresses (union top-k's gather of indices) no longer holds the backward pass."""

from __future__ import annotations

import threading
import time

import torch
from torch import nn

from gradsync.comm.solo import SoloCollective
from gradsync.compressors.topk import TopKCompressor
from gradsync.feedback.residual import ResidualFeedback
from gradsync.schedulers.engine.comm_thread import THREAD_NAME, CommThread, Job
from gradsync.schedulers.engine.events import events_made
from gradsync.schedulers.pipelined.lags import LagsSync
from gradsync.types import Payload

CPU = torch.device("cpu")


class HeldGathers(SoloCollective):
    """A world of one whose all-gathers wait while ``open`` is clear, noting their threads."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()
        self.threads: set[str] = set()

    def all_gather(self, payload: Payload, *, same_shape: bool = False) -> list[Payload]:
        self.threads.add(threading.current_thread().name)
        assert self.open.wait(30), "a gather was held for good"
        return super().all_gather(payload, same_shape=same_shape)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))  # 4 tensors


def _lags(exchange: str, collective: SoloCollective) -> tuple[nn.Module, LagsSync]:
    model = _model()
    sync = LagsSync(
        compressor=TopKCompressor(density=0.3, exchange=exchange),
        feedback=ResidualFeedback(),
        collective=collective,
        clock=time.perf_counter,
    )
    sync.attach(model, torch.optim.SGD(model.parameters(), lr=0.1))
    return model, sync


def _loss(model: nn.Module, step: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(step)
    x, y = torch.randn(16, 6, generator=gen), torch.randint(0, 3, (16,), generator=gen)
    return nn.functional.cross_entropy(model(x), y)


def _step(model: nn.Module, sync: LagsSync, step: int) -> None:
    sync.begin(step=step)
    _loss(model, step).backward()
    sync.step(step=step)
    model.zero_grad(set_to_none=True)


def test_jobs_take_their_events_from_a_pool_made_in_the_first_steps():
    torch.set_num_threads(1)
    model, sync = _lags("allgather", SoloCollective())
    for step in range(3):
        _step(model, sync, step)
    made = events_made()
    for step in range(3, 8):
        _step(model, sync, step)
    assert events_made() == made  # 4 groups a step, each a job with two events: none new
    sync.close()


def _settles(job: Job[object], within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while not job.settled and time.monotonic() < deadline:
        time.sleep(0.01)
    return job.settled


def test_a_job_that_submits_another_runs_it_inside_itself_in_order():
    comm = CommThread(CPU)
    ran: list[str] = []

    def outer() -> int:
        ran.append("outer")
        inner = comm.submit(lambda: ran.append(threading.current_thread().name) or 5)
        # Run at once, never queued (waiting here for a queued one would never end).
        assert inner.settled and inner.ready is None
        ran.append("after")
        return inner.wait()

    later = comm.submit(lambda: ran.append("later"))
    job = comm.submit(outer)
    assert _settles(job), "the job waited for one queued behind itself"
    assert job.wait() == 5
    later.wait()
    assert ran == ["later", "outer", THREAD_NAME, "after"]
    comm.close()


def test_a_failure_inside_a_nested_job_reaches_its_waiter():
    comm = CommThread(CPU)

    def broken() -> None:
        raise ConnectionError("link down")

    def outer() -> str:
        try:
            comm.submit(broken).wait()
        except ConnectionError as exc:
            return str(exc)
        return "no error"

    job = comm.submit(outer)
    assert _settles(job) and job.wait() == "link down"
    comm.close()


def test_a_union_gather_does_not_hold_backward_and_trains_as_its_own_selection():
    """One worker's union is its own selection, so union and allgather train alike; the union's
    gather, held back, must not hold the hooks: backward ends, and only ``step()`` waits."""
    torch.set_num_threads(1)
    held = HeldGathers()
    model, sync = _lags("union", held)
    reference_model, reference = _lags("allgather", SoloCollective())
    _step(model, sync, 0)  # the compressor talks at its first group: from then on, no wait
    _step(reference_model, reference, 0)
    held.open.clear()
    sync.begin(step=1)
    loss = _loss(model, 1)
    backward = threading.Thread(target=loss.backward, daemon=True)
    backward.start()
    backward.join(timeout=10)
    try:
        assert not backward.is_alive(), "a hook waited for the held gather"
    finally:
        held.open.set()
        backward.join(timeout=30)
    sync.step(step=1)
    model.zero_grad(set_to_none=True)
    _step(reference_model, reference, 1)
    for step in range(2, 4):
        _step(model, sync, step)
        _step(reference_model, reference, step)
    for ours, theirs in zip(model.parameters(), reference_model.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    assert THREAD_NAME in held.threads
    sync.close()
    reference.close()
