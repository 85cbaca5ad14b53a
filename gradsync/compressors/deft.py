"""``compressor=deft``: Distributed Execution of Fragmented Top-k (ICPP'23;
docs/methods/compressors/deft.md, "How it works").

Every step, on every worker:
1. split the flat gradient into layers (two-stage partitioning, computed once per group);
2. give each layer a local k proportional to its gradient norm (``assign_local_k``);
3. the decision worker ``t mod n`` packs layers into n bins by selection cost (LPT) and
   broadcasts the bins; worker r takes bin ``(t mod n + r) mod n``;
4. top-k inside the worker's own layers only, so selection gets cheaper as workers are added;
5. all-gather the (disjoint) indices; the union is the index set every worker sends values at.
Fully selected ("common") layers are sent whole by everyone. A worker whose bin is empty (more
workers than layers) selects nothing and still sends its values at the others' indices.

With several workers the plan is a host decision, so each step reads the layers' norms, and
every worker but the decision worker (which packed them) reads the broadcast bins on the host
(``host_syncs``); the norms and the selection in the worker's layers are batched
(``segments.py``, ``segmented_topk.py``), a constant number of kernels whatever the number of
layers. A lone worker has no plan to agree on: it takes every layer, with no collective and,
on a GPU, no host read (``deft_alone.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import torch
from torch import Tensor
from typing_extensions import Unpack

from gradsync.algorithms.deft_plan import (
    assign_local_k,
    bin_for_rank,
    decision_worker,
    decode_plan,
    encode_plan,
    lpt_bins,
    partition_layers,
)
from gradsync.comm.collective import LENGTHS_SYNC
from gradsync.comm.host_sync import host_sync
from gradsync.compressors.deft_alone import lone_selection
from gradsync.compressors.device_copy import on_device
from gradsync.compressors.index_ranges import range_indices
from gradsync.compressors.options.sparsifiers import DEFTConfig
from gradsync.compressors.segmented_topk import FixedTopK
from gradsync.compressors.selection import range_norms
from gradsync.compressors.sparse import AgreedIndexCompressor, index_dtype
from gradsync.compressors.warmup import WarmupArgs


class DEFTCompressor(AgreedIndexCompressor):
    host_syncs: ClassVar[Mapping[str, str]] = {
        "deft.norms": "each layer's local k follows from its norm, on the host (several "
        "workers, or one on a CPU)",
        "deft.plan": "the decision worker's bins, broadcast, are read by the other workers to "
        "know their own layers",
        LENGTHS_SYNC: "each worker selects its own number of indices",
    }

    def __init__(
        self, *, density: float, exact_k: bool = DEFTConfig.exact_k, **warmup: Unpack[WarmupArgs]
    ) -> None:
        super().__init__(density=density, **warmup)
        self.exact_k = exact_k
        self._partitions: dict[tuple[str, tuple[int, ...]], list[tuple[int, int]]] = {}

    def partition(self, name: str, sizes: list[int]) -> list[tuple[int, int]]:
        """The group's layers; sizes never change, so this is computed once (as the authors do)."""
        key = (name, tuple(sizes))
        if key not in self._partitions:
            self._partitions[key] = partition_layers(sizes, self.collective.world_size)
        return self._partitions[key]

    def agree(self, flat: Tensor, *, name: str, step: int, sizes: list[int], k: int) -> Tensor:
        ranges = self.partition(name, sizes)
        lengths = [end - start for start, end in ranges]
        if self.collective.world_size == 1:  # every layer is this worker's: nothing to agree on
            return lone_selection(tuple(lengths), k, self.exact_k, flat.device).indices(flat)
        with host_sync("deft.norms"):
            norms = range_norms(flat, ranges)
        ks = assign_local_k(norms, lengths, k, exact=self.exact_k)
        bins, common = self._plan(lengths, ks, step=step, device=flat.device)
        n, rank = self.collective.world_size, self.collective.rank
        mine = bins[bin_for_rank(rank, step, n)]
        selection = FixedTopK(
            [ranges[j][0] for j in mine],
            [lengths[j] for j in mine],
            [ks[j] for j in mine],
            numel=flat.numel(),
            device=flat.device,
        )
        own = selection.indices(flat)
        gathered = self.collective.all_gather((own.to(index_dtype(flat.numel())),))
        parts = [received[0].long() for received in gathered]
        if common:  # fully selected layers: every element, sent by everyone
            starts, sizes_of = [ranges[j][0] for j in common], [lengths[j] for j in common]
            parts.append(range_indices(starts, sizes_of, flat.device))
        return torch.cat(parts)

    def _plan(
        self, lengths: list[int], ks: list[int], *, step: int, device: torch.device
    ) -> tuple[list[list[int]], list[int]]:
        """(bins, common layers): packed here on the decision worker, which broadcasts them and
        already knows them; read from its broadcast everywhere else."""
        n = self.collective.world_size
        decider = decision_worker(step, n)
        if self.collective.rank == decider:
            plan = lpt_bins(lengths, ks, n)
            wire = on_device(encode_plan(plan), torch.int32, device)
            self.collective.broadcast((wire,), src=decider)
            return plan.bins, plan.common
        wire = torch.empty(n + len(lengths), dtype=torch.int32, device=device)
        (wire,) = self.collective.broadcast((wire,), src=decider)
        with host_sync("deft.plan"):
            values = wire.tolist()
        return decode_plan(values, n)
