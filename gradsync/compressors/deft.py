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
"""

from __future__ import annotations

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
from gradsync.compressors.selection import layerwise_topk_indices, range_norms
from gradsync.compressors.sparse import AgreedIndexCompressor, index_dtype
from gradsync.compressors.warmup import WarmupArgs


class DEFTCompressor(AgreedIndexCompressor):
    def __init__(
        self, *, density: float, exact_k: bool = False, **warmup: Unpack[WarmupArgs]
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

    def _plan(
        self, lengths: list[int], ks: list[int], *, step: int, device: torch.device
    ) -> tuple[list[list[int]], list[int]]:
        n = self.collective.world_size
        decider = decision_worker(step, n)
        if self.collective.rank == decider:
            values = encode_plan(lpt_bins(lengths, ks, n))
            wire = torch.tensor(values, dtype=torch.int32, device=device)
        else:
            wire = torch.empty(n + len(lengths), dtype=torch.int32, device=device)
        (wire,) = self.collective.broadcast((wire,), src=decider)
        return decode_plan(wire.tolist(), n)

    def agree(self, flat: Tensor, *, name: str, step: int, sizes: list[int], k: int) -> Tensor:
        ranges = self.partition(name, sizes)
        lengths = [end - start for start, end in ranges]
        ks = assign_local_k(range_norms(flat, ranges), lengths, k, exact=self.exact_k)
        bins, common = self._plan(lengths, ks, step=step, device=flat.device)
        n, rank = self.collective.world_size, self.collective.rank
        mine = bins[bin_for_rank(rank, step, n)]
        own = layerwise_topk_indices(flat, [ranges[j] for j in mine], [ks[j] for j in mine])
        gathered = self.collective.all_gather((own.to(index_dtype(flat.numel())),))
        parts = [received[0].long() for received in gathered]
        parts += [torch.arange(*ranges[j], device=flat.device) for j in common]
        return torch.cat(parts)
