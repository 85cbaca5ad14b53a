"""Exchanges started while the submitting thread goes on computing (backward), over a process
group of their own: all-reduces run asynchronously on the group's threads; all-gathers run in
submission order on a communication thread (collectives release the GIL while they wait on the
network, so the overlap is real)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from gradsync.types import Collective, Payload

_STOP = object()


class Exchanges:
    def __init__(self, collective: Collective) -> None:
        self.collective = collective
        self._jobs: queue.Queue[Any] = queue.Queue()
        self._results: queue.Queue[tuple[int, Any, BaseException | None]] = queue.Queue()
        self._pending = 0
        self._reducing: dict[int, Callable[[], Payload]] = {}
        self._timings: list[tuple[float, float]] = []
        self._thread = threading.Thread(target=self._run, name="gradsync-exchange", daemon=True)
        self._thread.start()

    def submit(self, key: int, payload: Payload, *, allreducible: bool) -> None:
        """Start an all-reduce (summing payloads; the process group's own threads run it, as
        DDP's buckets do) or queue an all-gather (every worker's payload; its ragged lengths
        are agreed first, so it runs on this object's thread)."""
        if allreducible:
            self._reducing[key] = self.collective.start_all_reduce(payload)
            return
        self._pending += 1
        self._jobs.put((key, payload))

    def wait(self) -> dict[int, Payload | list[Payload]]:
        """Every submitted exchange's result, by key; re-raises the first failure."""
        results: dict[int, Any] = {}
        error: BaseException | None = None
        reducing, self._reducing = self._reducing, {}
        for key, finish in reducing.items():
            try:
                results[key] = finish()
            except BaseException as exc:
                error = error or exc
        while self._pending:
            key, result, failure = self._results.get()
            self._pending -= 1
            error = error or failure
            results[key] = result
        if error is not None:
            raise error
        return results

    def detach(self, keys: Iterable[int]) -> dict[int, Callable[[], Payload]]:
        """Take the all-reduces of ``keys`` out of what ``wait`` waits for: each key's
        function waits for its result, for a caller that needs it only later."""
        return {key: self._reducing.pop(key) for key in keys}

    def take_timings(self) -> list[tuple[float, float]]:
        """(bytes sent, seconds) of every all-gather since the last call, as they ran: under
        the job's real load, peers' skew included."""
        timings, self._timings = self._timings, []
        return timings

    def close(self) -> None:
        self._jobs.put(_STOP)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not _STOP:
            key, payload = job
            try:
                start = time.perf_counter()
                gathered = self.collective.all_gather(payload)
                sent = sum(t.numel() * t.element_size() for t in payload)
                self._timings.append((float(sent), time.perf_counter() - start))
                self._results.put((key, gathered, None))
            except BaseException as exc:  # handed to the waiting thread, which raises it
                self._results.put((key, None, exc))
