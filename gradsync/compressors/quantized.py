"""What the quantizers share: one scale per tensor, codes packed densely, all-gathered payloads.

A quantizer maps every tensor of a group to one float scale and one small integer code per
element. The codes of all quantized tensors are packed together at ``bits`` per element (no
padding between tensors), so a payload costs what the method claims. Trailing tensors kept in
float (TernGrad's classifier) travel as float32. Workers' codes differ, so payloads are
all-gathered and averaged, as TernGrad's parameter server does.

Every step works on all of a group's quantized tensors at once (``segments.py``): per-tensor
statistics are segment reductions, and encoding and decoding are elementwise over the whole
group with each tensor's parameters spread over its elements, so the number of kernels does not
grow with the number of tensors. A method says three things: its statistics (per-tensor
parameters of its codes, and the scales), its rule (an element's code), and its fused encoder.

Two routes run them. A GPU's encodes in one fused kernel (``quant_kernels.py``: each element's
parameters, draw, code and its byte's packing in registers) and decodes in another, with the
statistics compiled too (``fused_segments.py``). A CPU's runs the same statistics and rule
eagerly over rows in cache-sized blocks (``Segments``), packs with ``bitpack``, and takes its
draws from a generator: a hash per element, computed eagerly, costs a CPU more than the
generator (``counter_draws.py``). The two routes' draws differ; each is reproducible.

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
from gradsync.compressors.code_paths import cpu_branch
from gradsync.compressors.counter_draws import MAX_INDEX, DrawKey, draw_key
from gradsync.compressors.fused import FusedKernel
from gradsync.compressors.fused_segments import Layout
from gradsync.compressors.quant_kernels import decode_packed
from gradsync.compressors.scratch import Scratch
from gradsync.compressors.seeding import seeded_generator
from gradsync.compressors.segments import Segments, segments
from gradsync.compressors.sparse import UsesCollective, group_sizes
from gradsync.compressors.warmup import DensitySchedule
from gradsync.types import GroupInfo, Payload

Statistics = tuple[tuple[Tensor, ...], Tensor]
"""(per-tensor parameters of a method's rule, one value per tensor each; the scales)."""


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
    """The rule takes uniform draws in [0, 1), one per element."""
    code_offset: float
    code_unit: float
    encoder: ClassVar[FusedKernel[Tensor]]
    """The rule in one fused kernel, for a GPU's route: ``encoder(flat, head, tables, key,
    parameters, *encoder_args())`` packs the codes of ``flat[:head]`` at the draws of ``key``
    (None unless ``stochastic``)."""

    def __init__(self, *, seed: int = 0) -> None:
        super().__init__()
        self.seed = seed
        # Reused on a CPU: filling fresh pages costs as much as the work on them.
        self._scratch = Scratch()

    # ---- what a subclass defines ---------------------------------------------------------
    def statistics(self, flat: Tensor, head: int, layout: Layout) -> Statistics:
        """The rule's per-tensor parameters and the scales (1-d float32) of the tensors of
        ``flat[:head]``, laid out as ``layout`` (``Segments`` on a CPU's route, its tables on a
        GPU's)."""
        raise NotImplementedError

    def scales_agreed(self) -> bool:
        """True when ``statistics`` made every worker's scales identical (kept off the
        payload)."""
        return False

    def codes(self, values: Tensor, draws: Tensor | None, *parameters: Tensor, out: Tensor) -> None:
        """The rule on a CPU's route, into ``out`` (uint8): codes in [0, 2**bits) of ``values``,
        each parameter broadcast over them (draws: None unless ``stochastic``; they may be
        overwritten). ``encoder`` runs the same rule."""
        raise NotImplementedError

    def encoder_args(self) -> tuple[int, ...]:
        """What ``encoder`` takes after the parameters (the method's constants)."""
        return ()

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
        if quantized:
            layout = segments(tuple(sizes[:quantized]), flat.device)
            on_cpu = cpu_branch(flat.device)
            parameters, scales = self.statistics(flat, head, layout if on_cpu else layout.tables)
            if on_cpu:
                packed = self._encode_rows(flat[:head], layout, parameters, group)
            else:
                key = self._draw_key(group, head) if self.stochastic else None
                args = (flat, head, layout.tables, key, parameters, *self.encoder_args())
                packed = self.encoder(*args)
        else:
            packed, scales = flat.new_empty(0, dtype=torch.uint8), flat.new_empty(0)
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

    def _encode_rows(
        self, values: Tensor, layout: Segments, parameters: tuple[Tensor, ...], group: GroupInfo
    ) -> Tensor:
        """A CPU's route: the rule over rows in blocks, then packing."""
        head = values.numel()
        # Codes for whole bytes, the padding zero, so packing needs no padded copy.
        whole_bytes = packed_size(head, self.bits) * (8 // self.bits)
        codes = self._scratch.get("codes", whole_bytes, values, torch.uint8)
        draws = self._uniform_draws(head, values, name=group.name, step=group.step)
        inputs = [values] if draws is None else [values, draws]
        if parameters:
            layout.map(self._codes_into, inputs, parameters, out=codes[:head])
        else:  # nothing to spread: one pass over the whole group
            self._codes_into(*inputs, out=codes[:head])
        codes[head:].zero_()
        return pack(codes, self.bits)

    def _codes_into(self, values: Tensor, *rest: Tensor, out: Tensor) -> None:
        """``codes`` as ``Segments.map`` calls it: the draws, if any, then the parameters."""
        draws, parameters = (rest[0], rest[1:]) if self.stochastic else (None, rest)
        self.codes(values, draws, *parameters, out=out)

    def _uniform_draws(self, numel: int, like: Tensor, *, name: str, step: int) -> Tensor | None:
        """``numel`` uniform draws from a generator (a CPU's route), or None for a
        deterministic quantizer."""
        if not self.stochastic:
            return None
        # Draws differ between workers (rank) and steps, and are reproducible from the seed.
        generator = seeded_generator(
            self.seed, self.collective.rank, step, name, device=like.device
        )
        return self._scratch.get("draws", numel, like).uniform_(generator=generator)

    def _draw_key(self, group: GroupInfo, numel: int) -> DrawKey:
        """The key of this call's ``numel`` draws on a GPU's route: per worker, step and group."""
        if numel > MAX_INDEX:
            raise ValueError(f"{numel} elements to draw for; at most {MAX_INDEX} per group")
        return draw_key(self.seed, self.collective.rank, group.step, group.name)

    def decompress(self, payload: Payload, ctx: QuantCtx, out: Tensor | None = None) -> Tensor:
        packed, tail = payload[0], payload[-1]
        scales = ctx.agreed_scales if ctx.agreed_scales is not None else payload[1]
        head = sum(ctx.sizes[: ctx.quantized])
        flat = (
            out.view(-1)
            if out is not None
            else torch.empty(head + tail.numel(), dtype=ctx.dtype, device=packed.device)
        )
        if not ctx.quantized:
            flat.copy_(tail)
        elif cpu_branch(packed.device):
            layout = segments(tuple(ctx.sizes[: ctx.quantized]), packed.device)
            codes = unpack(packed, self.bits, head)
            layout.map(self._values, [codes], [scales * self.code_unit], out=flat[:head])
            flat[head:] = tail
        else:
            ends = segments(tuple(ctx.sizes[: ctx.quantized]), packed.device).tables.ends
            unit, offset = self.code_unit, self.code_offset
            decode_packed(packed, scales, ends, flat[:head], self.bits, offset, unit)
            if tail.numel():
                flat[head:] = tail
        return flat.view(ctx.shape)

    def _values(self, codes: Tensor, factor: Tensor, *, out: Tensor) -> None:
        """``(code - code_offset)·factor``, factor = unit·scale."""
        out.copy_(codes).sub_(self.code_offset).mul_(factor)  # a mixed-type sub(out=) is slower

    def selected(self, payload: Payload, ctx: Any) -> Tensor | None:
        return None  # every element's value is communicated, if only in a few bits
