"""``compressor=topk``: the k largest-magnitude elements, with error feedback
(docs/methods/compressors/topk.md).

``scope=global`` takes k = int(density·n_g) over the whole flattened model ("gtopk");
``scope=layer`` takes k_l = max(1, int(density·n_l)) inside every tensor. ``exchange`` chooses
how the selections travel (see ``exchange.py``).
"""

from __future__ import annotations

from torch import Tensor
from typing_extensions import Unpack

from gradsync.compressors.choices import SCOPES
from gradsync.compressors.exchange import ExchangedSparsifier
from gradsync.compressors.options.sparsifiers import TopKConfig
from gradsync.compressors.selection import per_tensor_topk_indices, topk_indices
from gradsync.compressors.sparse import density_k
from gradsync.compressors.warmup import WarmupArgs


class TopKCompressor(ExchangedSparsifier):
    same_count = True  # k (or each tensor's k_l) follows from the sizes alone

    def __init__(
        self,
        *,
        density: float,
        exchange: str = TopKConfig.exchange,
        scope: str = TopKConfig.scope,
        **warmup: Unpack[WarmupArgs],
    ) -> None:
        super().__init__(density=density, exchange=exchange, **warmup)
        if scope not in SCOPES:
            raise ValueError(f"unknown scope {scope!r}; valid: {', '.join(SCOPES)}")
        self.scope = scope

    def select(self, flat: Tensor, sizes: list[int], density: float) -> Tensor:
        if self.scope == "layer":
            return per_tensor_topk_indices(flat, sizes, density)
        return topk_indices(flat, density_k(density, flat.numel()))
