"""How locally selected indices travel: ``compressor.exchange=union|allgather``
(docs/methods/compressors/topk.md, "How it works").

* ``union`` (the DEFT paper's Top-k baseline): all-gather the indices, take their union U, and
  all-reduce every worker's values at U. Memory is cleared on all of U. Density grows with the
  number of workers, up to n times the setup density: the "gradient build-up".
* ``allgather`` (GRACE, OMGS, sands-lab): all-gather (values, indices); the receiver adds them
  up. Each worker clears its memory only where it selected.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor
from typing_extensions import Unpack

from gradsync.comm.host_sync import host_sync
from gradsync.compressors.choices import EXCHANGES
from gradsync.compressors.sparse import (
    SparseCtx,
    UsesCollective,
    group_sizes,
    index_dtype,
    scatter,
    unpack_values,
    values_at,
)
from gradsync.compressors.warmup import DensitySchedule, WarmupArgs
from gradsync.types import Collective, GroupInfo, Payload

UNION_SYNC = "union.indices"
UNION_SYNCS: Mapping[str, str] = {UNION_SYNC: "the size of the union of the workers' indices"}
"""The host sync of ``exchange=union``, for the ``host_syncs`` of the sparsifiers that offer it."""


def union_of_indices(
    indices: Tensor, numel: int, collective: Collective, *, same_count: bool
) -> Tensor:
    """The sorted union (int64) of every worker's ``indices`` (each worker's distinct), identical
    on all workers. ``same_count``: every worker selected as many indices (no lengths need
    exchanging)."""
    gathered = collective.all_gather((indices.to(index_dtype(numel)),), same_shape=same_count)
    if collective.world_size == 1:  # its own indices: sorting them is their union, no sync
        return torch.sort(gathered[0][0]).values.long()
    with host_sync(UNION_SYNC):  # how many distinct indices there are is up to the data
        union: Tensor = torch.unique(torch.cat([received[0] for received in gathered]))
    return union.long()


class UnionExchange:
    allreducible = True

    def pack(
        self,
        flat: Tensor,
        indices: Tensor,
        shape: torch.Size,
        collective: Collective,
        *,
        same_count: bool,
    ) -> tuple[Payload, Any]:
        union = union_of_indices(indices, flat.numel(), collective, same_count=same_count)
        return values_at(flat, union, shape)

    def unpack(self, payload: Payload, ctx: SparseCtx, out: Tensor | None = None) -> Tensor:
        return unpack_values(payload, ctx, out)

    def selected(self, payload: Payload, ctx: SparseCtx) -> Tensor:
        return ctx.indices

    def sent(self, indices: Tensor, payload: Payload, ctx: SparseCtx) -> Tensor:
        """Where this worker's ``pack`` sent values (int64): the union (``indices``: its own
        selection)."""
        return ctx.indices


class AllgatherExchange:
    allreducible = False

    def pack(
        self,
        flat: Tensor,
        indices: Tensor,
        shape: torch.Size,
        collective: Collective,
        *,
        same_count: bool,
    ) -> tuple[Payload, Any]:
        return (flat[indices], indices.to(index_dtype(flat.numel()))), shape

    def unpack(self, payload: Payload, ctx: torch.Size, out: Tensor | None = None) -> Tensor:
        values, indices = payload
        return scatter(values, indices, ctx, out)

    def selected(self, payload: Payload, ctx: torch.Size) -> Tensor:
        return payload[1].long()

    def sent(self, indices: Tensor, payload: Payload, ctx: torch.Size) -> Tensor:
        """Where this worker's ``pack`` sent values (int64): its own selection ``indices``, with
        no copy of the payload's narrower ones."""
        return indices


def make_exchange(name: str) -> UnionExchange | AllgatherExchange:
    if name == "union":
        return UnionExchange()
    if name == "allgather":
        return AllgatherExchange()
    raise ValueError(f"unknown exchange {name!r}; valid: {', '.join(EXCHANGES)}")


class ExchangedSparsifier(UsesCollective, DensitySchedule):
    """Base of sparsifiers that select locally (top-k, threshold) and exchange as configured."""

    lossless = False
    steady_step = 0
    sends_selected_values = True  # union or own selection, the values as they are
    selects_alone = False
    error_feedback = True
    host_syncs: ClassVar[Mapping[str, str]] = UNION_SYNCS
    same_count = False
    """``select`` picks as many indices on every worker, a number known from the group alone
    (and the epoch, which every worker shares)."""

    def __init__(self, *, density: float, exchange: str, **warmup: Unpack[WarmupArgs]) -> None:
        super().__init__()
        self.set_density(density, **warmup)
        self.exchange = make_exchange(exchange)
        self.allreducible = self.exchange.allreducible
        # union: values at the union every worker has; allgather: each worker's own selection.
        self.payload_same_shape = self.exchange.allreducible or self.same_count

    def select(self, flat: Tensor, sizes: list[int], density: float) -> Tensor:
        """This worker's indices (int64) into ``flat``, at this epoch's ``density``."""
        raise NotImplementedError

    def compress(self, grad: Tensor, *, group: GroupInfo) -> tuple[Payload, Any]:
        flat = grad.reshape(-1)
        indices = self.select(flat, group_sizes(grad, group.sizes), self.density_at(group.epoch))
        return self.exchange.pack(
            flat, indices, grad.shape, self.collective, same_count=self.same_count
        )

    def decompress(self, payload: Payload, ctx: Any, out: Tensor | None = None) -> Tensor:
        return self.exchange.unpack(payload, ctx, out)

    def selected(self, payload: Payload, ctx: Any) -> Tensor | None:
        return self.exchange.selected(payload, ctx)
