"""Batches read by loader processes, on their way to the worker's device.

On a GPU, each batch (in pinned host memory, the loader's ``pin_memory``) is copied on a side
stream while the step before it runs: when batch k is handed over, batch k+1 has already been
taken from the loader and its copy issued, so the device copies it while it computes step k.
What that costs: the loader is asked for batch k+1 before batch k is handed over, so a loader
that has not read batch k+1 yet holds back step k too (loader processes reading ahead usually
have). The compute stream waits for batch k's copy only (an event recorded after it on the
side stream), not for the copy of batch k+1 behind it; each tensor handed over is recorded as
used by the compute stream, so the caching allocator does not give its memory to a later copy
on the side stream while a step still reads it. ``one_ahead`` is that order, with the copy and
the wait as functions (the CPU tests check it with plain ones). On the CPU the batches pass
through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

import torch
from torch import Tensor

In = TypeVar("In")
Started = TypeVar("Started")
Out = TypeVar("Out")


def on_device(
    batches: Iterable[Sequence[Tensor]], device: torch.device
) -> Iterator[tuple[Tensor, ...]]:
    if device.type != "cuda":
        return (tuple(batch) for batch in batches)
    return _copied_ahead(batches, device)


def one_ahead(
    batches: Iterable[In], start: Callable[[In], Started], finish: Callable[[Started], Out]
) -> Iterator[Out]:
    """Each batch ``start``-ed (its copy issued) as it is taken, and ``finish``-ed (waited for)
    as it is handed over; batch k+1 is taken and started before batch k is finished."""
    pending: list[Started] = []  # at most one: the batch started but not handed over yet
    for batch in batches:
        pending.append(start(batch))
        if len(pending) == 2:
            yield finish(pending.pop(0))
    if pending:
        yield finish(pending.pop())


def _copied_ahead(
    batches: Iterable[Sequence[Tensor]], device: torch.device
) -> Iterator[tuple[Tensor, ...]]:
    side = torch.cuda.Stream(device)

    def start(batch: Sequence[Tensor]) -> tuple[tuple[Tensor, ...], torch.cuda.Event]:
        with torch.cuda.stream(side):  # left at once: the side stream is never left current
            copied = tuple(t.to(device, non_blocking=True) for t in batch)
        done = torch.cuda.Event()
        done.record(side)
        return copied, done

    def finish(started: tuple[tuple[Tensor, ...], torch.cuda.Event]) -> tuple[Tensor, ...]:
        copied, done = started
        compute = torch.cuda.current_stream(device)  # the stream of whoever takes the batch
        compute.wait_event(done)  # not wait_stream: that would wait for the next copy too
        for tensor in copied:
            tensor.record_stream(compute)
        return copied

    yield from one_ahead(batches, start, finish)
