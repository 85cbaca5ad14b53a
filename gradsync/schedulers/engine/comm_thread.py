"""The one thread that issues a scheduler's collectives, in the order they were submitted.

NCCL needs every rank to issue the collectives of a communicator in the same order, and
collectives issued from two threads at once may deadlock. So every collective of a step
(exchanges and the talking compressors do while they select) is a job for this thread, run
first in, first out; the plan fixes the submission order identically on every rank.

On CUDA the jobs run on the thread's own stream: a job starts (on the device) after the work
the submitting stream had queued when it was submitted, and the waiting stream continues (on
the device) after the job's completion event; the host never waits for the device here. On the
CPU the same calls are plain waits.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar, cast

import torch
from torch import Tensor

T = TypeVar("T")
THREAD_NAME = "gradsync-comm"
log = logging.getLogger("gradsync")


def _tensors(value: Any) -> Iterator[Tensor]:
    """The tensors in a payload, a list of payloads, or any nesting of tuples and lists."""
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _tensors(item)


_SETTLING = threading.Lock()
"""Makes settling a job once, whichever thread comes first (rare contention: a lock for all)."""


class Job(Generic[T]):
    """A submitted piece of work; ``wait`` gives its result (or raises its error)."""

    def __init__(self, work: Callable[[], T]) -> None:
        self.work = work
        self.ready: torch.cuda.Event | None = None
        """CUDA: recorded on the submitting stream; the job's stream waits for it."""
        self.finished: torch.cuda.Event | None = None
        """CUDA: recorded on the job's stream after the work was issued."""
        # Held until the job is settled: a bare lock costs a fraction of an Event's condition
        # variable, and a step submits a job per group.
        self._pending = threading.Lock()
        self._pending.acquire()
        self._done = False
        self._result: Any = None
        self._error: BaseException | None = None

    def settle(self, result: Any, error: BaseException | None) -> None:
        """Give the job its outcome and let its waiters go; a job settled already keeps the
        outcome it had (an error path may try to settle what the thread just settled)."""
        with _SETTLING:
            if self._done:
                return
            self._result, self._error, self._done = result, error, True
        self._pending.release()

    def _settled(self) -> None:
        """Block until the job is settled."""
        with self._pending:  # free once settled; given back at once for the next waiter
            pass

    def wait(self) -> T:
        """The result, once the thread has run the job; on CUDA the caller's stream (not the
        host) waits for the device to finish it."""
        self._settled()
        if self._error is not None:
            raise self._error
        if self.finished is not None:
            stream = torch.cuda.current_stream()
            stream.wait_event(self.finished)
            for tensor in _tensors(self._result):  # made on the job's stream, used on this one
                tensor.record_stream(stream)
        return cast(T, self._result)

    @property
    def settled(self) -> bool:
        # Not ``_pending.locked()``: a waiter holds the lock for a moment after settling.
        return self._done

    def completed(self) -> None:
        """Block the calling thread until the job's work finished on the device (CUDA: its
        completion event), not merely until it was issued: what credit and windows count."""
        self._settled()
        if self.finished is not None:
            self.finished.synchronize()

    def follow(self) -> None:
        """From inside another job: the current stream waits for the work this job's submitter
        had queued when it submitted it (for a job that uses this one's inputs early)."""
        if self.ready is not None:
            torch.cuda.current_stream().wait_event(self.ready)


class CommThread:
    def __init__(self, device: torch.device) -> None:
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._jobs: queue.SimpleQueue[Job[Any] | None] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def submit(self, work: Callable[[], T], *, inputs: Any = ()) -> Job[T]:
        """Queue ``work`` after everything submitted before it. ``inputs``: tensors it reads or
        writes, kept from reuse (CUDA) until the job's stream is done with them."""
        if self._closed:
            raise RuntimeError("the communication thread was closed: nothing runs after close()")
        job: Job[T] = Job(work)
        if self.stream is not None:
            job.ready = torch.cuda.Event()
            job.ready.record()  # on the submitting thread's current stream
            for tensor in _tensors(inputs):
                tensor.record_stream(self.stream)
        self._jobs.put(job)
        return job

    def settle_here(self, job: Job[T]) -> T:
        """From inside a running job: run ``job`` now on this thread and its stream, record
        its completion event and settle it. For work an earlier job started that ends later
        (waiting for an asynchronous collective), so each such exchange gets a completion of its
        own that other threads can wait for."""
        if threading.current_thread() is not self._thread:
            raise RuntimeError("settle_here() runs only on the communication thread")
        try:
            if self.stream is None:
                result = job.work()
            else:
                with torch.cuda.stream(self.stream):
                    result = job.work()
                    job.finished = torch.cuda.Event()
                    job.finished.record(self.stream)
        except BaseException as exc:
            job.settle(None, exc)
            raise
        job.settle(result, None)
        return result

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop after the jobs already submitted. A thread stuck in a collective whose peer is
        gone is left behind (it is a daemon), not waited for forever."""
        self._closed = True
        self._jobs.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning(f"{THREAD_NAME}: still in a collective {timeout_s:.0f} s after close()")

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job.settle(self._execute(job), None)
            except BaseException as exc:  # handed to whoever waits for the job
                job.settle(None, exc)

    def _execute(self, job: Job[Any]) -> Any:
        if self.stream is None:
            return job.work()
        assert job.ready is not None
        with torch.cuda.stream(self.stream):
            self.stream.wait_event(job.ready)
            result = job.work()
            job.finished = torch.cuda.Event()
            job.finished.record(self.stream)
        return result
