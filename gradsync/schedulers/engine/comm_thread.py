"""The one thread that issues a scheduler's collectives, in the order they were submitted.

NCCL needs every rank to issue the collectives of a communicator in the same order, and
collectives issued from two threads at once may deadlock. So every collective of a step
(exchanges and the talking compressors do while they select) is a job for this thread, run
first in, first out; the plan fixes the submission order identically on every rank. A job that
submits another (a compression run on this thread, whose collective or exchange is a job too)
runs it at once, inside itself: the nested order is the job's own code, the same on every rank.

On CUDA the jobs run on the thread's own stream (or on the submitter's, when asked): a job
starts (on the device) after the work the submitting stream had queued when it was submitted,
and the waiting stream continues (on the device) after the job's completion event; the host
never waits for the device here. The events come from a pool (``events.py``), made once and
recorded again every step. On the CPU the same calls record and wait for nothing.

A job's tensors are not marked for the communication stream (``record_stream``) unless the
submitter asks (``inputs``): the engine's payloads are held by their exchange until the
submitting stream has waited for the job, and a buffer kept from step to step is never freed
at all, so the caching allocator cannot give their memory to another tensor while this stream
still reads it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any, Generic, TypeVar, cast

import torch
from torch import Tensor

from gradsync.schedulers.engine.events import Event, EventPool

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

    _pool: EventPool | None = None  # where its events go back (a class default for __del__)

    def __init__(self, work: Callable[[], T], pool: EventPool | None = None) -> None:
        self.work: Callable[[], T] | None = work
        """Let go once the job is settled, with whatever it holds."""
        self._pool = pool
        self.ready: Event | None = None
        """Recorded on the submitting stream; the job's stream waits for it."""
        self.finished: Event | None = None
        """Recorded on the job's stream after the work was issued."""
        self.stream: torch.cuda.Stream | None = None
        """CUDA: the submitter's stream, where a job submitted ``on_my_stream`` runs."""
        # Held until the job is settled: a bare lock costs a fraction of an Event's condition
        # variable, and a step submits a job per group.
        self._pending = threading.Lock()
        self._pending.acquire()
        self._done = False
        self._result: Any = None
        self._error: BaseException | None = None

    def __del__(self) -> None:
        # Nobody can wait for this job any more, so nobody can wait for its events' records.
        if self._pool is not None:
            self._pool.give_back(self.ready, self.finished)

    def run(self) -> T:
        assert self.work is not None, "a job runs once"
        return self.work()

    def settle(self, result: Any, error: BaseException | None) -> None:
        """Give the job its outcome and let its waiters go; a job settled already keeps the
        outcome it had (an error path may try to settle what the thread just settled)."""
        with _SETTLING:
            if self._done:
                return
            self._result, self._error, self._done = result, error, True
            self.work = None  # a closure may hold what holds this job: no cycle to outlive it
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
            self.finished.wait()  # the current stream, on the device
            if self._pool is not None and self._pool.cuda:
                stream = torch.cuda.current_stream()
                # Made on the job's stream (a gather's output), used and freed on this one.
                for tensor in _tensors(self._result):
                    tensor.record_stream(stream)
        return cast(T, self._result)

    @property
    def settled(self) -> bool:
        # Not ``_pending.locked()``: a waiter holds the lock for a moment after settling.
        return self._done

    def follow(self) -> None:
        """From inside another job: the current stream waits for the work this job's submitter
        had queued when it submitted it (for a job that uses this one's inputs early)."""
        if self.ready is not None:
            self.ready.wait()


class CommThread:
    def __init__(self, device: torch.device) -> None:
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.events = EventPool(device)
        self._jobs: queue.SimpleQueue[Job[Any] | None] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def here(self) -> bool:
        """True on the communication thread itself (inside a job)."""
        return threading.get_ident() == self._thread.ident

    def submit(
        self, work: Callable[[], T], *, inputs: Any = (), on_my_stream: bool = False
    ) -> Job[T]:
        """Queue ``work`` after everything submitted before it. ``inputs``: tensors it reads or
        writes that the submitter may let go before it waits for the job, kept from reuse
        (CUDA) until the job's stream is done with them. ``on_my_stream``: the work's kernels
        go on the submitter's stream (CUDA), not the thread's, after what was queued there
        when the thread runs it; for work that makes and frees tensors of the submitter's (a
        compression and its state), which thus never cross streams.

        From inside a job, ``work`` runs at once on this thread and stream, and its job is
        settled when returned. It has no events: its waiter reached it through the running
        job's result, so it has waited for that job, whose completion is recorded after."""
        if self._closed:
            raise RuntimeError("the communication thread was closed: nothing runs after close()")
        job: Job[T] = Job(work, self.events)
        if self.here():
            try:
                job.settle(job.run(), None)
            except BaseException as exc:  # raised by the job's wait, as a queued one's is
                job.settle(None, exc)
            return job
        if on_my_stream:  # ordered on that stream: nothing to wait for
            job.stream = torch.cuda.current_stream() if self.stream is not None else None
            self._jobs.put(job)
            return job
        job.ready = self.events.take()
        job.ready.record()  # on the submitting thread's current stream
        if self.stream is not None:
            for tensor in _tensors(inputs):
                tensor.record_stream(self.stream)
        self._jobs.put(job)
        return job

    def settle_here(self, job: Job[T]) -> T:
        """From inside a running job: run ``job`` now on this thread and its stream, record
        its completion event and settle it. For work an earlier job started that ends later
        (waiting for an asynchronous collective), so each such exchange gets a completion of its
        own that other threads can wait for."""
        if not self.here():
            raise RuntimeError("settle_here() runs only on the communication thread")
        job._pool = self.events
        try:
            result = job.run()
            job.finished = self._finished()
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
        if self.stream is not None:  # every job's work, and its events, on this stream
            torch.cuda.set_device(self.stream.device)
            torch.cuda.set_stream(self.stream)
        while (job := self._jobs.get()) is not None:
            try:
                job.settle(self._execute(job), None)
            except BaseException as exc:  # handed to whoever waits for the job
                job.settle(None, exc)
            del job  # its events go back to the pool once its waiters let it go too

    def _execute(self, job: Job[Any]) -> Any:
        if job.ready is None:  # on the submitter's stream
            with torch.cuda.stream(job.stream) if job.stream is not None else nullcontext():
                result = job.run()
                job.finished = self._finished()
            return result
        job.ready.wait()  # this stream waits for what the submitter had queued
        result = job.run()
        job.finished = self._finished()
        return result

    def _finished(self) -> Event:
        """An event recorded on the current stream (the job's) after the work issued so far."""
        event = self.events.take()
        event.record()
        return event
