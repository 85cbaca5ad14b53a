"""Learning tasks: the loss the loop minimizes and the metrics evaluation reports.

Kept apart from the loop so each kind of data brings its own loss and metrics. A dataset names
its task in ``DataSpec.task``; ``build_task`` picks the class.
"""

from __future__ import annotations

from typing import Protocol

from torch import Tensor, nn

from gradsync.data.spec import DataSpec
from gradsync.tasks.classification import ClassificationTask
from gradsync.tasks.language_model import LanguageModelTask
from gradsync.tasks.recommendation import RecommendationTask


class Task(Protocol):
    eval_keys: tuple[str, ...]
    """Names of the sums ``eval_sums`` returns (added up over batches and workers)."""

    def loss(self, model: nn.Module, batch: tuple[Tensor, ...]) -> Tensor: ...

    def example_batch(self, batch_size: int) -> tuple[Tensor, ...]:
        """A training batch of the spec's shapes, on the default device (the meta device when
        only sizes matter); its values mean nothing."""
        ...

    def eval_sums(self, model: nn.Module, batch: tuple[Tensor, ...]) -> list[float]: ...

    def eval_metrics(self, sums: list[float]) -> dict[str, float]: ...


def build_task(spec: DataSpec) -> Task:

    tasks: dict[str, type] = {
        "classification": ClassificationTask,
        "language_model": LanguageModelTask,
        "recommendation": RecommendationTask,
    }
    if spec.task not in tasks:
        raise ValueError(f"unknown task {spec.task!r}; known: {', '.join(tasks)}")
    return tasks[spec.task](spec=spec)
