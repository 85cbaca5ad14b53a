"""``compressor=cltk``: cyclic local top-k (ScaleCom's CLT-k, DEFT's baseline;
docs/methods/compressors/cltk.md).

At step t the leader ``t mod n`` alone runs a top-k over its compensated gradient and broadcasts
the k indices; every worker sends its values there. Density is exactly the setup density at any
worker count, but the other workers wait while the leader selects.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradsync.compressors.selection import topk_indices
from gradsync.compressors.sparse import AgreedIndexCompressor, index_dtype


class CLTKCompressor(AgreedIndexCompressor):
    selects_alone = True  # the leader's top-k, while the others wait in the broadcast

    def leader(self, step: int) -> int:
        return step % self.collective.world_size

    def agree(self, flat: Tensor, *, name: str, step: int, sizes: list[int], k: int) -> Tensor:
        leader = self.leader(step)
        if self.collective.rank == leader:
            indices = topk_indices(flat, k).to(index_dtype(flat.numel()))
        else:  # only the leader selects; the others just make room for its answer
            indices = torch.empty(k, dtype=index_dtype(flat.numel()), device=flat.device)
        (indices,) = self.collective.broadcast((indices,), src=leader)
        return indices.long()
