"""What the quantizers share: one scale per tensor, codes packed densely, all-gathered payloads.

A quantizer maps every tensor of a group to one float scale and one small integer code per
element. The codes of all quantized tensors are packed together at ``bits`` per element (no
padding between tensors), so a payload costs what the method claims. Trailing tensors kept in
float (TernGrad's classifier) travel as float32. Workers' codes differ, so payloads are
all-gathered and averaged, as TernGrad's parameter server does.

Payload: ``(packed codes, [scales,] float tail)``; the scales are left out when the workers
have agreed on them beforehand (TernGrad's scaler sharing), since every receiver already has them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from gradsync.compressors.bitpack import pack, unpack
from gradsync.compressors.seeding import seeded_generator
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
    bits: int
    """Bits per element on the wire."""
    stochastic: bool
    """``encode`` takes uniform draws in [0, 1), one per element."""
    code_offset: float
    code_unit: float

    def __init__(self, *, seed: int = 0) -> None:
        super().__init__()
        self.seed = seed
        self._draws: Tensor | None = None  # reused: filling fresh pages costs as much as the RNG

    # ---- what a subclass defines ---------------------------------------------------------
    def scales(self, parts: list[Tensor]) -> tuple[list[Tensor], Tensor]:
        """The tensors to quantize (possibly transformed, e.g. clipped) and one scale for each
        (a 1-d tensor)."""
        raise NotImplementedError

    def scales_agreed(self) -> bool:
        """True when ``scales`` made every worker's scales identical (kept off the payload)."""
        return False

    def encode(self, part: Tensor, scale: Tensor, draws: Tensor | None) -> Tensor:
        """uint8 codes in [0, 2**bits) for the elements of ``part``. ``draws`` (None unless
        ``stochastic``) are uniform in [0, 1) and may be overwritten."""
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
        parts: list[Tensor] = []
        scales = flat.new_empty(0)
        if quantized:
            parts, scales = self.scales(list(torch.split(flat[:head], sizes[:quantized])))
        draws = self._uniform_draws(sizes[:quantized], flat, name=group.name, step=group.step)
        codes = [
            self.encode(part, scale, part_draws)
            for part, scale, part_draws in zip(parts, scales, draws, strict=True)
        ]
        packed = pack(
            torch.cat(codes) if codes else flat.new_empty(0, dtype=torch.uint8), self.bits
        )
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

    def _uniform_draws(
        self, sizes: list[int], like: Tensor, *, name: str, step: int
    ) -> list[Tensor | None]:
        """One tensor of uniform draws per part (all None for a deterministic quantizer)."""
        if not self.stochastic:
            return [None] * len(sizes)
        numel = sum(sizes)
        buffer = self._draws
        if (
            buffer is None
            or buffer.numel() < numel
            or (buffer.dtype, buffer.device) != (like.dtype, like.device)
        ):
            buffer = self._draws = like.new_empty(numel)
        # Draws differ between workers (rank) and steps, and are reproducible from the seed.
        generator = seeded_generator(
            self.seed, self.collective.rank, step, name, device=like.device
        )
        return list(torch.split(buffer[:numel].uniform_(generator=generator), sizes))

    def decompress(self, payload: Payload, ctx: QuantCtx, out: Tensor | None = None) -> Tensor:
        packed, tail = payload[0], payload[-1]
        scales = ctx.agreed_scales if ctx.agreed_scales is not None else payload[1]
        head_sizes = ctx.sizes[: ctx.quantized]
        head = sum(head_sizes)
        flat = (
            out.view(-1)
            if out is not None
            else torch.empty(head + tail.numel(), dtype=ctx.dtype, device=packed.device)
        )
        codes = unpack(packed, self.bits, head)
        flat[:head].copy_(codes).sub_(self.code_offset)  # a mixed-type sub(out=) is ~10x slower
        for part_out, scale in zip(torch.split(flat[:head], head_sizes), scales, strict=True):
            part_out.mul_(scale * self.code_unit)
        flat[head:] = tail
        return flat.view(ctx.shape)

    def selected(self, payload: Payload, ctx: Any) -> Tensor | None:
        return None  # every element's value is communicated, if only in a few bits
