"""Compressors that send every element and all-reduce it directly: as it is (``none``) or in a
narrower float type (``fp16``, ``bf16``).

A narrow type is divided by the number of workers before it is summed on the wire, as
PyTorch's ``fp16_compress_hook`` and ``bf16_compress_hook`` do (cast, then divide in the narrow
type): the sum on the wire is then the mean, which overflows only where the mean itself does
(fp16 tops out at 65504). ``decompress`` multiplies back by the number of workers in the
gradient's own type, because the schedulers average after they combine; a narrow value has at
most 11 significant bits, so that product and the schedulers' division are exact in float32
and the result equals the hook's. Rounding loses at most half a unit in the last place of the
narrow type per element, so no error feedback is kept by default.

A parameter server (ps_bsp, asp, ssp) sums pushes in float32, so the division is not needed
there; it is kept (the server multiplies back with the worker's context) so that one payload
means the same on every path. It only costs values below fp16's subnormal range times the
number of workers, far below any gradient that moves a model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from gradsync.compressors.stateless import Stateless
from gradsync.compressors.warmup import DensitySchedule
from gradsync.types import Collective, GroupInfo, Payload


@dataclass(frozen=True)
class DenseCtx:
    dtype: torch.dtype
    """The gradient's own type, restored by ``decompress``."""
    divided_by: int
    """What the values were divided by before the sum on the wire (1: not at all)."""


class DenseCompressor(Stateless, DensitySchedule):
    allreducible = True
    lossless = False
    error_feedback = False
    density = 1.0
    payload_same_shape = True  # the gradient's own shape
    steady_step = 0
    sends_selected_values = False
    selects_alone = False
    host_syncs: ClassVar[Mapping[str, str]] = {}
    wire_dtype: torch.dtype | None = None
    """The type on the wire; None: the gradient's own (no copy)."""

    def __init__(self) -> None:
        self._collective: Collective | None = None

    def bind(self, collective: Collective) -> None:
        self._collective = collective  # its workers are what the sum on the wire adds up

    def compress(self, grad: Tensor, *, group: GroupInfo) -> tuple[Payload, Any]:
        if self.wire_dtype is None:
            return (grad,), DenseCtx(grad.dtype, 1)
        workers = 1 if self._collective is None else self._collective.world_size
        narrow = grad.to(self.wire_dtype, copy=True)  # a copy: the division must not touch grad
        if workers > 1:
            narrow.div_(workers)
        return (narrow,), DenseCtx(grad.dtype, workers)

    def decompress(self, payload: Payload, ctx: DenseCtx, out: Tensor | None = None) -> Tensor:
        if ctx.divided_by == 1:
            return payload[0].to(ctx.dtype)  # the payload itself when it is already wide
        # A copy: the payload may still be on its way (a worker decompresses its own first).
        wide = payload[0].to(ctx.dtype, copy=True) if out is None else out.copy_(payload[0])
        return wide.mul_(ctx.divided_by)

    def selected(self, payload: Payload, ctx: Any) -> Tensor | None:
        return None
