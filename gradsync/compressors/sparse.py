"""What every sparsifier shares: index dtypes, scattering, and the agreed-index-set base class.

A sparsifier whose workers agree on one index set ``I`` (random-k from a shared seed, union top-k,
CLT-k, DEFT) sends only the values at ``I``: payloads then line up elementwise and are summed by
an all-reduce. The subclass says how the workers agree (``agree``); the rest is here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor
from typing_extensions import Unpack

from gradsync.comm.solo import SoloCollective
from gradsync.compressors.stateless import Stateless
from gradsync.compressors.warmup import DensitySchedule, WarmupArgs
from gradsync.types import Collective, GroupInfo, Payload


def index_dtype(numel: int) -> torch.dtype:
    """The narrowest index type that addresses ``numel`` elements: indices go on the wire at this
    size, as real sparse all-gathers send them."""
    return torch.int32 if numel <= torch.iinfo(torch.int32).max else torch.int64


def group_sizes(grad: Tensor, sizes: Sequence[int] | None) -> list[int]:
    """Element counts of the tensors in a flat group (one tensor when ``sizes`` is None)."""
    if sizes is None:
        return [grad.numel()]
    if sum(sizes) != grad.numel():
        raise ValueError(f"sizes add up to {sum(sizes)}, but the gradient has {grad.numel()}")
    return list(sizes)


def density_k(density: float, numel: int) -> int:
    """k = int(density * numel), the floor every reference implementation uses, but at least 1."""
    return max(1, int(density * numel))


def scatter(
    values: Tensor, indices: Tensor, shape: torch.Size, out: Tensor | None = None
) -> Tensor:
    """A dense tensor of ``shape``, zero except ``values`` at the flat ``indices``: ``out``
    overwritten, when given."""
    dense = out.view(-1).zero_() if out is not None else values.new_zeros(shape.numel())
    dense[indices.long()] = values
    return dense.view(shape)


@dataclass(frozen=True)
class SparseCtx:
    indices: Tensor
    """Flat indices (int64) whose values the payload carries, in payload order."""
    shape: torch.Size


def values_at(flat: Tensor, indices: Tensor, shape: torch.Size) -> tuple[Payload, SparseCtx]:
    """The payload of an agreed index set: only the values travel, the indices stay local."""
    return (flat[indices],), SparseCtx(indices=indices, shape=shape)


def unpack_values(payload: Payload, ctx: SparseCtx, out: Tensor | None = None) -> Tensor:
    return scatter(payload[0], ctx.indices, ctx.shape, out)


class UsesCollective(Stateless):
    """A compressor that talks to the other workers while it selects. It starts with the world of
    one (usable on its own) until the sync strategy binds the job's collective."""

    def __init__(self) -> None:
        self.collective: Collective = SoloCollective()

    def bind(self, collective: Collective) -> None:
        self.collective = collective


class AgreedIndexCompressor(UsesCollective, DensitySchedule):
    """Base of sparsifiers whose workers all send values at the same index set."""

    allreducible = True
    payload_same_shape = True  # values at the one agreed index set
    lossless = False
    steady_step = 0
    sends_selected_values = True
    selects_alone = False
    error_feedback = True
    host_syncs: ClassVar[Mapping[str, str]] = {}

    def __init__(self, *, density: float, **warmup: Unpack[WarmupArgs]) -> None:
        super().__init__()
        self.set_density(density, **warmup)

    def agree(self, flat: Tensor, *, name: str, step: int, sizes: list[int], k: int) -> Tensor:
        """The index set (int64, same on every worker) whose values this step sends, for ``k``
        elements selected (this epoch's density of the group)."""
        raise NotImplementedError

    def compress(self, grad: Tensor, *, group: GroupInfo) -> tuple[Payload, SparseCtx]:
        flat = grad.reshape(-1)
        sizes = group_sizes(grad, group.sizes)
        k = density_k(self.density_at(group.epoch), flat.numel())
        indices = self.agree(flat, name=group.name, step=group.step, sizes=sizes, k=k)
        return values_at(flat, indices, grad.shape)

    def decompress(self, payload: Payload, ctx: SparseCtx, out: Tensor | None = None) -> Tensor:
        return unpack_values(payload, ctx, out)

    def selected(self, payload: Payload, ctx: SparseCtx) -> Tensor | None:
        return ctx.indices
