"""``compressor=threshold``: every element with |x| >= λ, for a λ fixed before training (SPECS §4).

With ``threshold`` unset, λ = 1/(2·sqrt(k)) for k = int(density·n_g), fixed at the first step
(the heuristic of Sahu et al.). How many elements pass is up to the gradient: the actual
density is whatever it is, and it builds up across workers like Top-k's.
"""

from __future__ import annotations

from torch import Tensor

from gradsync.compressors.exchange import ExchangedSparsifier
from gradsync.compressors.selection import threshold_for_density, threshold_indices


class ThresholdCompressor(ExchangedSparsifier):
    same_count = False  # as many as pass λ, which differs between workers

    def __init__(
        self, *, density: float, threshold: float | None = None, exchange: str = "union"
    ) -> None:
        super().__init__(exchange=exchange)
        self.density = density
        """The density λ is derived from; also logged as the setup density."""
        self.threshold = threshold

    def select(self, flat: Tensor, sizes: list[int]) -> Tensor:
        if self.threshold is None:
            self.threshold = threshold_for_density(self.density, flat.numel())
        return threshold_indices(flat, self.threshold)
