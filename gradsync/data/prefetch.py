"""Batches read by loader processes, on their way to the worker's device.

On a GPU, each batch (in pinned host memory, the loader's ``pin_memory``) is copied on a side
stream while the step before it runs: the copy of batch k+1 is issued as soon as the host has
queued step k and asks for the next batch, while the device, behind the host, still runs step
k. Batch k is handed over before batch k+1 is taken from the loader, so a slow loader delays
the step that needs its batch, not the one before. The compute stream waits for the copy
before it uses a batch, and each tensor is recorded as used by the compute stream, so the
caching allocator does not give its memory to the side stream's next copy while a step still
reads it. On the CPU the batches pass through.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import torch
from torch import Tensor


def on_device(
    batches: Iterable[Sequence[Tensor]], device: torch.device
) -> Iterator[tuple[Tensor, ...]]:
    if device.type != "cuda":
        return (tuple(batch) for batch in batches)
    return _copied_ahead(iter(batches), device)


def _copied_ahead(
    batches: Iterator[Sequence[Tensor]], device: torch.device
) -> Iterator[tuple[Tensor, ...]]:
    side = torch.cuda.Stream(device)
    compute = torch.cuda.current_stream(device)

    def copy(batch: Sequence[Tensor] | None) -> tuple[Tensor, ...] | None:
        if batch is None:
            return None
        with torch.cuda.stream(side):
            return tuple(t.to(device, non_blocking=True) for t in batch)

    ahead = copy(next(batches, None))
    while ahead is not None:
        compute.wait_stream(side)
        for tensor in ahead:
            tensor.record_stream(compute)
        yield ahead
        ahead = copy(next(batches, None))
