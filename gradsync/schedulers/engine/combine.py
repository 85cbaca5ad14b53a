"""Turning what an exchange returned into the summed gradient and the elements it carried."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from gradsync.types import Compressor, Payload


def combine(
    compressor: Compressor, received: Payload | list[Payload], ctx: Any, *, like: Tensor
) -> tuple[Tensor, Tensor | None]:
    """(sum over workers of the decompressed gradient, indices of the elements whose values
    travelled, or None for all of them). ``received`` is the all-reduced payload when the
    compressor is all-reducible, else every worker's payload from an all-gather."""
    if compressor.allreducible:
        assert not isinstance(received, list)
        return compressor.decompress(received, ctx), compressor.selected(received, ctx)
    assert isinstance(received, list)
    summed = torch.zeros_like(like)
    for payload in received:
        summed += compressor.decompress(payload, ctx)
    picks = [compressor.selected(p, ctx) for p in received]
    present = [s for s in picks if s is not None]
    selected = torch.cat(present).unique() if len(present) == len(picks) else None
    return summed, selected
