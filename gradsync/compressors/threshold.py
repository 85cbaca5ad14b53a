"""``compressor=threshold``: every element with |x| >= λ, for a λ fixed before training
(docs/methods/compressors/threshold.md).

With ``threshold`` unset, λ = 1/(2·sqrt(k)) for k = int(density·n_g), each group's from its
own size n_g (the heuristic of Sahu et al.); during a density warm-up it follows each epoch's
density. How many elements pass is up to the gradient: the actual density is whatever it is,
and it builds up across workers like Top-k's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from torch import Tensor
from typing_extensions import Unpack

from gradsync.comm.collective import LENGTHS_SYNC
from gradsync.comm.host_sync import host_sync
from gradsync.compressors.exchange import UNION_SYNCS, ExchangedSparsifier
from gradsync.compressors.options.sparsifiers import ThresholdConfig
from gradsync.compressors.selection import threshold_for_density, threshold_indices
from gradsync.compressors.warmup import WarmupArgs


class ThresholdCompressor(ExchangedSparsifier):
    same_count = False  # as many as pass λ, which differs between workers
    host_syncs: ClassVar[Mapping[str, str]] = {
        "threshold.indices": "how many elements pass λ is up to the data",
        LENGTHS_SYNC: "so each worker's count differs, and gathering exchanges lengths",
        **UNION_SYNCS,
    }

    def __init__(
        self,
        *,
        density: float,
        threshold: float | None = None,
        exchange: str = ThresholdConfig.exchange,
        **warmup: Unpack[WarmupArgs],
    ) -> None:
        super().__init__(density=density, exchange=exchange, **warmup)
        self.threshold = threshold
        """λ as configured; None: derived from the density."""

    def threshold_at(self, density: float, numel: int) -> float:
        """λ for a group of ``numel`` elements at ``density``: as configured, or derived from
        the group's own size (so it stays fixed while the density does)."""
        if self.threshold is not None:
            return self.threshold
        return threshold_for_density(density, numel)

    def select(self, flat: Tensor, sizes: list[int], density: float) -> Tensor:
        with host_sync("threshold.indices"):
            return threshold_indices(flat, self.threshold_at(density, flat.numel()))
