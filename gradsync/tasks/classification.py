"""Cross-entropy classification; top-1 accuracy, and top-5 when there are more than 10 classes."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gradsync.data.spec import DataSpec


class ClassificationTask:
    def __init__(self, *, spec: DataSpec) -> None:
        self.top5 = spec.num_classes > 10
        self.eval_keys = ("loss_sum", "correct", "correct5", "count")
        self.input_shape = spec.input_shape

    def example_batch(self, batch_size: int) -> tuple[Tensor, ...]:
        return torch.zeros(batch_size, *self.input_shape), torch.zeros(batch_size, dtype=torch.long)

    def loss(self, model: nn.Module, batch: tuple[Tensor, ...]) -> Tensor:
        inputs, targets = batch
        return F.cross_entropy(model(inputs), targets)

    @torch.no_grad()
    def eval_sums(self, model: nn.Module, batch: tuple[Tensor, ...]) -> list[float]:
        inputs, targets = batch
        logits = model(inputs)
        loss_sum = F.cross_entropy(logits, targets, reduction="sum").item()
        correct = (logits.argmax(dim=1) == targets).sum().item()
        k = min(5, logits.shape[1])
        correct5 = (logits.topk(k, dim=1).indices == targets[:, None]).any(dim=1).sum().item()
        return [loss_sum, float(correct), float(correct5), float(targets.numel())]

    def eval_metrics(self, sums: list[float]) -> dict[str, float]:
        loss_sum, correct, correct5, count = sums
        metrics = {"eval/loss": loss_sum / count, "eval/accuracy": correct / count}
        if self.top5:
            metrics["eval/accuracy_top5"] = correct5 / count
        return metrics
