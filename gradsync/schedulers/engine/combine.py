"""Turning what an exchange returned into the summed gradient and the elements it carried."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from gradsync.types import Compressor, Payload


def combine(
    compressor: Compressor,
    received: Payload | list[Payload],
    ctx: Any,
    *,
    like: Tensor,
    out: Tensor | None = None,
    scratch: Tensor | None = None,
) -> tuple[Tensor, int | Tensor | None]:
    """(sum over workers of the decompressed gradient, how many distinct elements' values
    travelled, or None for all of them). ``received`` is the all-reduced payload when the
    compressor is all-reducible, else every worker's payload from an all-gather. The sum may be
    written into ``out`` and each gathered payload decompressed into ``scratch`` (both shaped
    as ``like``, overwritten) when given, sparing their allocation. The count of gathered
    selections is a 0-d tensor, read only when metrics are logged."""
    if compressor.allreducible:
        assert not isinstance(received, list)
        selected = compressor.selected(received, ctx)
        summed = compressor.decompress(received, ctx, out=out)
        return summed, None if selected is None else selected.numel()
    assert isinstance(received, list)
    summed = out.zero_() if out is not None else torch.zeros_like(like)
    for payload in received:
        summed += compressor.decompress(payload, ctx, out=scratch)
    picks = [compressor.selected(p, ctx) for p in received]
    if any(s is None for s in picks):
        return summed, None
    # Distinct indices by marking them (sorting them out with unique() would wait for the
    # device to learn how many there are).
    carried = torch.zeros(like.numel(), dtype=torch.bool, device=like.device)
    for indices in picks:
        assert indices is not None
        carried[indices] = True
    return summed, carried.sum()
