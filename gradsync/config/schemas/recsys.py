"""Schemas of the recommendation options: model ncf, dataset movielens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gradsync.config.checks import Options, Rule, option
from gradsync.config.schema import FileDatasetConfig, TaskBound
from gradsync.data.layouts import MOVIELENS_RATINGS

RECOMMENDATION = "recommendation"


@dataclass
class NCFConfig(TaskBound, Options):
    GROUP: ClassVar[str] = "model"
    TASK: ClassVar[str] = RECOMMENDATION
    _target_: str = "gradsync.models.ncf.NeuMF"
    _partial_: bool = True
    factors: int = option(64, at_least=1)
    """Size of the GMF user and item embeddings."""
    mlp_layers: list[int] = option(
        default_factory=lambda: [256, 128, 64], each=True, at_least=1, min_entries=1
    )
    """MLP widths; the first is the concatenated user+item embedding (each half of it)."""
    dropout: float = option(0.5, at_least=0, below=1)
    """Dropout probability of the MLP tower."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda o: o.mlp_layers[0] % 2 == 0,
            lambda o: (
                "model.mlp_layers[0] must be even (split between user and item), "
                f"got {o.mlp_layers[0]}"
            ),
        ),
    )


@dataclass
class MovieLensConfig(FileDatasetConfig, Options):
    GROUP: ClassVar[str] = "dataset"
    TASK: ClassVar[str] = RECOMMENDATION
    name: ClassVar[str] = "movielens"
    _target_: str = "gradsync.data.movielens.MovieLens"
    variant: str = "ml-1m"
    """ml-1m or ml-20m."""
    negatives: int = option(4, at_least=0)
    """Sampled negatives per training positive."""
    eval_negatives: int = option(99, at_least=1)
    """Sampled negatives ranked against each user's held-out positive."""
    seed: int = 0
    """Seeds the negative sampling (the same on every worker)."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda o: o.variant in MOVIELENS_RATINGS,
            lambda o: (
                f"dataset.variant must be one of {', '.join(MOVIELENS_RATINGS)}, got {o.variant}"
            ),
        ),
    )

    def required_paths(self) -> list[str]:
        return [MOVIELENS_RATINGS[self.variant]]


SCHEMAS: dict[str, dict[str, type]] = {
    "model": {"ncf": NCFConfig},
    "dataset": {"movielens": MovieLensConfig},
}
