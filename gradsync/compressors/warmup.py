"""DGC's density warm-up (Lin et al., ICLR 2018, §3.4): ``compressor.warmup_epochs``.

In the first epochs a sparsifier sends more, the density falling exponentially from
``warmup_density`` to ``density``: at epoch e < W it is
warmup_density·(density/warmup_density)^(e/W), from epoch W on ``density`` (0.25, 0.063, 0.016,
0.004, then 0.001 for W = 4). Every sparsifier reads its density here, through
``DensitySchedule.density_at``.
"""

from __future__ import annotations

from typing import TypedDict

from typing_extensions import NotRequired

DEFAULT_WARMUP_DENSITY = 0.25
"""DGC's first-epoch density (75% sparsity)."""


def scheduled_density(
    epoch: int, *, density: float, warmup_epochs: int, warmup_density: float
) -> float:
    """The density to select at ``epoch`` (0-based); ``density`` itself when ``warmup_epochs``
    is 0 or the warm-up is over, and never below it."""
    if epoch >= warmup_epochs:
        return density
    decayed: float = warmup_density * (density / warmup_density) ** (epoch / warmup_epochs)
    return max(density, min(1.0, decayed))


class WarmupArgs(TypedDict):
    """The warm-up settings every sparsifier's constructor takes (``compressor.warmup_*``)."""

    warmup_epochs: NotRequired[int]
    warmup_density: NotRequired[float]


class DensitySchedule:
    """What a compressor selects in each epoch: ``density``, after a warm-up when it has one
    (dense and quantizing compressors have none)."""

    density: float
    warmup_epochs: int = 0
    warmup_density: float = DEFAULT_WARMUP_DENSITY

    def set_density(
        self,
        density: float,
        *,
        warmup_epochs: int = 0,
        warmup_density: float = DEFAULT_WARMUP_DENSITY,
    ) -> None:
        self.density = density
        self.warmup_epochs = warmup_epochs
        self.warmup_density = warmup_density

    def density_at(self, epoch: int) -> float:
        """The fraction of elements to select in ``epoch`` (what ``comm/density_setup`` logs)."""
        return scheduled_density(
            epoch,
            density=self.density,
            warmup_epochs=self.warmup_epochs,
            warmup_density=self.warmup_density,
        )
