"""Schemas of the recommendation options: model ncf, dataset movielens."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from gradsync.config.checks import require
from gradsync.config.schema import FileDatasetConfig, TaskBound
from gradsync.data.layouts import MOVIELENS_RATINGS

RECOMMENDATION = "recommendation"


@dataclass
class NCFConfig(TaskBound):
    TASK: ClassVar[str] = RECOMMENDATION
    _target_: str = "gradsync.models.ncf.NeuMF"
    _partial_: bool = True
    factors: int = 64
    """Size of the GMF user and item embeddings."""
    mlp_layers: list[int] = field(default_factory=lambda: [256, 128, 64])
    """MLP widths; the first is the concatenated user+item embedding (each half of it)."""
    dropout: float = 0.5
    """Dropout probability of the MLP tower."""

    def __post_init__(self) -> None:
        require(self.factors >= 1, f"model.factors must be >= 1, got {self.factors}")
        require(
            len(self.mlp_layers) >= 1 and all(w >= 1 for w in self.mlp_layers),
            "model.mlp_layers needs at least one size, all >= 1",
        )
        require(
            self.mlp_layers[0] % 2 == 0,
            f"model.mlp_layers[0] must be even (split between user and item), "
            f"got {self.mlp_layers[0]}",
        )
        require(0 <= self.dropout < 1, f"model.dropout must be in [0, 1), got {self.dropout}")


@dataclass
class MovieLensConfig(FileDatasetConfig):
    TASK: ClassVar[str] = RECOMMENDATION
    name: ClassVar[str] = "movielens"
    _target_: str = "gradsync.data.movielens.MovieLens"
    variant: str = "ml-1m"
    """ml-1m or ml-20m."""
    negatives: int = 4
    """Sampled negatives per training positive."""
    eval_negatives: int = 99
    """Sampled negatives ranked against each user's held-out positive."""
    seed: int = 0
    """Seeds the negative sampling (the same on every worker)."""

    def required_paths(self) -> list[str]:
        return [MOVIELENS_RATINGS[self.variant]]

    def __post_init__(self) -> None:
        require(
            self.variant in MOVIELENS_RATINGS,
            f"dataset.variant must be one of {', '.join(MOVIELENS_RATINGS)}, got {self.variant}",
        )
        require(self.negatives >= 0, f"dataset.negatives must be >= 0, got {self.negatives}")
        require(
            self.eval_negatives >= 1,
            f"dataset.eval_negatives must be >= 1, got {self.eval_negatives}",
        )


SCHEMAS: dict[str, dict[str, type]] = {
    "model": {"ncf": NCFConfig},
    "dataset": {"movielens": MovieLensConfig},
}
