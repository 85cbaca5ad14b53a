"""The learning task: the loss the loop minimizes and the metrics evaluation reports.

Kept apart from the loop so new kinds of data (language modelling, recommendation) bring their
own loss and metrics without touching it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ClassificationTask:
    eval_keys = ("loss_sum", "correct", "count")

    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
        inputs, targets = batch
        return F.cross_entropy(model(inputs), targets)

    @torch.no_grad()
    def eval_sums(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> list[float]:
        inputs, targets = batch
        logits = model(inputs)
        loss_sum = F.cross_entropy(logits, targets, reduction="sum").item()
        correct = (logits.argmax(dim=1) == targets).sum().item()
        return [loss_sum, float(correct), float(targets.numel())]

    def eval_metrics(self, sums: list[float]) -> dict[str, float]:
        loss_sum, correct, count = sums
        return {"eval/loss": loss_sum / count, "eval/accuracy": correct / count}


TASKS = {"classification": ClassificationTask}
