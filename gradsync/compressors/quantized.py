"""What the quantizers share: one scale per tensor, codes packed densely, all-gathered payloads.

A quantizer maps every tensor of a group to one float scale and one small integer code per
element. The codes of all quantized tensors are packed together at ``bits`` per element (no
padding between tensors), so a payload costs what the method claims. Trailing tensors kept in
float (TernGrad's classifier) travel as float32. Workers' codes differ, so payloads are
all-gathered and averaged, as TernGrad's parameter server does.

Every step works on all of a group's quantized tensors at once (``segments.py``): per-tensor
statistics are segment reductions, and encoding and decoding are elementwise kernels over the
whole group with each tensor's scale spread over its elements, so the number of kernels does not
grow with the number of tensors.

Payload: ``(packed codes, [scales,] float tail)``; the scales are left out when the workers
have agreed on them beforehand (TernGrad's scaler sharing), since every receiver already has them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from gradsync.compressors.bitpack import pack, packed_size, unpack
from gradsync.compressors.scratch import Scratch
from gradsync.compressors.seeding import seeded_generator
from gradsync.compressors.segments import Segments, segments
from gradsync.compressors.sparse import UsesCollective, group_sizes
from gradsync.compressors.warmup import DensitySchedule
from gradsync.types import GroupInfo, Payload


@dataclass(frozen=True)
class QuantCtx:
    sizes: list[int]
    """Element counts of the group's tensors."""
    quantized: int
    """How many leading tensors were quantized; the rest travel as floats."""
    agreed_scales: Tensor | None
    """Scales every worker shares (then they are not in the payload); None: in the payload."""
    shape: torch.Size
    dtype: torch.dtype


class PackedQuantizer(UsesCollective, DensitySchedule):
    """Base of per-tensor quantizers. A subclass says how scales are found and how an element
    becomes a code; a code c of a tensor with scale v decodes to ``(c - code_offset)·unit·v``."""

    allreducible = False
    # Codes, scales and the float tail all follow from the group's sizes and epoch, which
    # every worker shares.
    payload_same_shape = True
    lossless = False
    steady_step = 0
    sends_selected_values = False
    selects_alone = False
    density = 1.0
    host_syncs: ClassVar[Mapping[str, str]] = {}
    bits: int
    """Bits per element on the wire."""
    stochastic: bool
    """``encode`` takes uniform draws in [0, 1), one per element."""
    code_offset: float
    code_unit: float

    def __init__(self, *, seed: int = 0) -> None:
        super().__init__()
        self.seed = seed
        # Reused: filling fresh pages costs as much as the work on them.
        self._scratch = Scratch()

    # ---- what a subclass defines ---------------------------------------------------------
    def scales(self, head: Tensor, layout: Segments) -> tuple[Tensor, Tensor]:
        """The elements to quantize (``head`` itself, or a transformed copy, e.g. clipped) and
        one scale for each of the ``layout``'s tensors (a 1-d float32 tensor)."""
        raise NotImplementedError

    def scales_agreed(self) -> bool:
        """True when ``scales`` made every worker's scales identical (kept off the payload)."""
        return False

    def encode(
        self, values: Tensor, layout: Segments, scales: Tensor, draws: Tensor | None, out: Tensor
    ) -> None:
        """uint8 codes in [0, 2**bits) for ``values`` (all of the layout's tensors), into
        ``out``. ``draws`` (None unless ``stochastic``) are uniform in [0, 1) and may be
        overwritten."""
        raise NotImplementedError

    def float_tensors(self, group: GroupInfo, tensors: int) -> int:
        """How many of the group's ``tensors`` (its last ones) travel as floats; none unless a
        method says otherwise."""
        return 0

    # ---- the shared machinery ------------------------------------------------------------
    def compress(self, grad: Tensor, *, group: GroupInfo) -> tuple[Payload, Any]:
        flat = grad.reshape(-1)
        sizes = group_sizes(grad, group.sizes)
        quantized = len(sizes) - self.float_tensors(group, len(sizes))
        head = sum(sizes[:quantized])
        # Codes for whole bytes, the padding zero, so packing needs no padded copy.
        whole_bytes = packed_size(head, self.bits) * (8 // self.bits)
        codes = self._scratch.get("codes", whole_bytes, flat, torch.uint8)
        scales = flat.new_empty(0)
        if quantized:
            layout = segments(tuple(sizes[:quantized]), flat.device)
            values, scales = self.scales(flat[:head], layout)
            draws = self._uniform_draws(head, flat, name=group.name, step=group.step)
            self.encode(values, layout, scales, draws, codes[:head])
        codes[head:].zero_()
        packed = pack(codes, self.bits)
        tail = flat[head:]
        agreed = self.scales_agreed()
        payload = (packed, tail) if agreed else (packed, scales.to(flat.dtype), tail)
        ctx = QuantCtx(
            sizes=sizes,
            quantized=quantized,
            agreed_scales=scales if agreed else None,
            shape=grad.shape,
            dtype=flat.dtype,
        )
        return payload, ctx

    def _uniform_draws(self, numel: int, like: Tensor, *, name: str, step: int) -> Tensor | None:
        """``numel`` uniform draws, or None for a deterministic quantizer."""
        if not self.stochastic:
            return None
        # Draws differ between workers (rank) and steps, and are reproducible from the seed.
        generator = seeded_generator(
            self.seed, self.collective.rank, step, name, device=like.device
        )
        return self._scratch.get("draws", numel, like).uniform_(generator=generator)

    def decompress(self, payload: Payload, ctx: QuantCtx, out: Tensor | None = None) -> Tensor:
        packed, tail = payload[0], payload[-1]
        scales = ctx.agreed_scales if ctx.agreed_scales is not None else payload[1]
        head = sum(ctx.sizes[: ctx.quantized])
        flat = (
            out.view(-1)
            if out is not None
            else torch.empty(head + tail.numel(), dtype=ctx.dtype, device=packed.device)
        )
        if ctx.quantized:
            layout = segments(tuple(ctx.sizes[: ctx.quantized]), packed.device)
            codes = unpack(packed, self.bits, head)
            layout.map(self._values, [codes], [scales * self.code_unit], out=flat[:head])
        flat[head:] = tail
        return flat.view(ctx.shape)

    def _values(self, codes: Tensor, factor: Tensor, *, out: Tensor) -> None:
        """``(code - code_offset)·factor``, factor = unit·scale."""
        out.copy_(codes).sub_(self.code_offset).mul_(factor)  # a mixed-type sub(out=) is slower

    def selected(self, payload: Payload, ctx: Any) -> Tensor | None:
        return None  # every element's value is communicated, if only in a few bits
