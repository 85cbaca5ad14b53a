"""The events the communication thread orders its jobs with, made once and recorded again.

A job has two: ``ready``, recorded on the submitting stream, which the communication stream
waits for before the job's work; and ``finished``, recorded on the communication stream after
the work, which a waiting stream waits for. Making a ``torch.cuda.Event`` is a driver call and
an allocation, and a step submits a job per group, so events come from an ``EventPool``: a job
takes its events when it is made and gives them back when it is let go.

Why recording an event again is safe: a stream's wait for an event (``cudaStreamWaitEvent``)
and a host's (``cudaEventSynchronize``) use the record the event holds when the wait is
issued; a later record changes nothing for a wait issued before it. An event goes back to the
pool only once its job is garbage, when nobody can issue a new wait for its old record.

On the CPU the same calls go to ``HostEvent``, which records and waits for nothing (the host's
own order is the only one there): the CPU runs the GPU's path, and ``events_made`` counts what a
GPU would create.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

import torch


class Event(Protocol):
    """What a job needs of ``torch.cuda.Event``."""

    def record(self, stream: Any = None) -> None: ...

    def wait(self, stream: Any = None) -> None: ...


class HostEvent:
    """A CPU's event: the host's order is the device's, so there is nothing to record or wait
    for."""

    __slots__ = ()

    def record(self, stream: Any = None) -> None:
        pass

    def wait(self, stream: Any = None) -> None:
        pass


_made = 0
_counting = threading.Lock()


def events_made() -> int:
    """Events created so far in this process, by every pool (an operation counter's figure:
    after a pool's first steps it stays put)."""
    return _made


def _count() -> None:
    global _made
    with _counting:  # rare: only while a pool fills
        _made += 1


class EventPool:
    """Events of one device, taken by jobs and given back when they are let go. The list's
    ``pop`` and ``extend`` are atomic, so the training and communication threads share it
    without a lock."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._free: list[Event] = []

    def take(self) -> Event:
        try:
            return self._free.pop()
        except IndexError:
            _count()
            return torch.cuda.Event() if self.cuda else HostEvent()

    def give_back(self, ready: Event | None, finished: Event | None) -> None:
        if ready is not None:
            self._free.append(ready)
        if finished is not None:
            self._free.append(finished)
