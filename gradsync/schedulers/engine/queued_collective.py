"""The job's collective as a compressor sees it once a scheduler is attached: every call is a job
for the scheduler's communication thread, so a compressor that talks while it compresses
(TernGrad's scalers, union top-k, CLT-k, DEFT) takes its place in the one FIFO order, after the
exchanges submitted before it. The caller waits for its answer (on CUDA its stream waits).
A compression the engine runs on that thread itself (``ExchangeEngine``: a compressor that
talks) calls straight through, in its job's place.

The time the training thread waits is the step's ``agree`` span: communication, not
compression."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from gradsync.schedulers.engine.comm_thread import CommThread, Job
from gradsync.schedulers.engine.step_timer import StepTimer
from gradsync.types import Collective, Payload

T = TypeVar("T")
AGREE = "agree"


class QueuedCollective:
    def __init__(self, collective: Collective, comm: CommThread, timer: StepTimer) -> None:
        self.inner = collective
        self.rank = collective.rank
        self.world_size = collective.world_size
        self._comm = comm
        self._timer = timer
        self.calls = 0
        """Calls the training thread handed to the communication thread: a compressor that
        talks shows itself by them."""

    def _queue(self, work: Callable[[], T], inputs: Any = ()) -> Job[T]:
        if not self._comm.here():
            self.calls += 1
        return self._comm.submit(work, inputs=inputs)

    def _call(self, work: Callable[[], T]) -> T:
        """``work`` in the thread's order, waited for. From the thread itself (a compression
        the engine runs there) it is that order's next call, issued at once; the training
        thread waits for nothing then, so no ``agree`` span is counted. The caller holds what
        it hands over until the answer comes: nothing to keep from reuse."""
        if self._comm.here():
            return work()
        start = self._timer.mark()
        result = self._queue(work).wait()
        self._timer.add(AGREE, start, self._timer.mark())
        return result

    def all_reduce(self, payload: Payload, *, op: str = "sum") -> Payload:
        return self._call(lambda: self.inner.all_reduce(payload, op=op))

    def start_all_reduce(self, payload: Payload, *, op: str = "sum") -> Callable[[], Payload]:
        job = self._queue(lambda: self.inner.all_reduce(payload, op=op), inputs=payload)
        return job.wait

    def issue_all_reduce(self, payload: Payload, *, op: str = "sum") -> Callable[[], Payload]:
        """Issue the all-reduce from the communication thread, in its FIFO place, without
        holding the thread: its next job (on this communicator or another) is issued while this
        one runs. The returned function waits for it to complete (on CUDA the caller's stream
        waits, the host does not)."""
        started = self._queue(lambda: self.inner.start_all_reduce(payload, op=op), inputs=payload)
        return lambda: started.wait()()

    def all_gather(self, payload: Payload, *, same_shape: bool = False) -> list[Payload]:
        return self._call(lambda: self.inner.all_gather(payload, same_shape=same_shape))

    def broadcast(self, payload: Payload, *, src: int) -> Payload:
        return self._call(lambda: self.inner.broadcast(payload, src=src))

    def send(self, payload: Payload, *, dst: int, tag: int = 0) -> None:
        self._call(lambda: self.inner.send(payload, dst=dst, tag=tag))

    def start_send(self, payload: Payload, *, dst: int, tag: int = 0) -> Callable[[], None]:
        return self._queue(lambda: self.inner.send(payload, dst=dst, tag=tag), inputs=payload).wait

    def recv(self, payload: Payload, *, src: int | None = None, tag: int = 0) -> int:
        return self._call(lambda: self.inner.recv(payload, src=src, tag=tag))

    def start_recv(self, payload: Payload, *, src: int, tag: int = 0) -> Callable[[], Payload]:
        def receive() -> Payload:
            self.inner.recv(payload, src=src, tag=tag)
            return payload

        return self._queue(receive, inputs=payload).wait

    def world(self) -> Collective:
        """The whole job's collective itself, not queued: its traffic is the scheduler's own,
        which the scheduler submits to its communication thread."""
        return self.inner.world()

    def barrier(self) -> None:
        self._call(self.inner.barrier)

    def reduce_metrics(
        self, values: Sequence[float], *, device: torch.device, op: str = "sum"
    ) -> list[float]:
        """Logged metrics, between steps: in the thread's order, but no part of a step's time
        (an ``agree`` span here would land in the next step's figures)."""
        return self._queue(lambda: self.inner.reduce_metrics(values, device=device, op=op)).wait()

    def fork(self, *, interface: str | None = None) -> Collective:
        return self.inner.fork(interface=interface)

    def take_bytes(self) -> Any:
        return self.inner.take_bytes()
