"""Implicit-feedback recommendation (NCF): binary cross-entropy on sampled negatives; HR@10 on
a held-out positive ranked among sampled negatives (positive in column 0 of the candidates)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gradsync.data.spec import DataSpec

HIT_RANK = 10


class RecommendationTask:
    eval_keys = ("loss_sum", "hits", "users")

    def __init__(self, *, spec: DataSpec) -> None:
        self.num_items = spec.num_items

    def example_batch(self, batch_size: int) -> tuple[Tensor, ...]:
        ids = torch.zeros(batch_size, dtype=torch.long)
        return ids, ids, torch.zeros(batch_size)

    def loss(self, model: nn.Module, batch: tuple[Tensor, ...]) -> Tensor:
        users, items, labels = batch
        return F.binary_cross_entropy_with_logits(model(users, items), labels.float())

    @torch.no_grad()
    def eval_sums(self, model: nn.Module, batch: tuple[Tensor, ...]) -> list[float]:
        users, candidates = batch
        num_users, num_candidates = candidates.shape
        scores = model(users.repeat_interleave(num_candidates), candidates.reshape(-1))
        scores = scores.view(num_users, num_candidates)
        labels = torch.zeros_like(scores)
        labels[:, 0] = 1.0
        loss_sum = F.binary_cross_entropy_with_logits(scores, labels, reduction="sum").item()
        # Rank of the positive = how many candidates score strictly higher.
        rank = (scores[:, 1:] > scores[:, :1]).sum(dim=1)
        hits = (rank < HIT_RANK).sum().item()
        return [loss_sum / num_candidates, float(hits), float(num_users)]

    def eval_metrics(self, sums: list[float]) -> dict[str, float]:
        loss_sum, hits, users = sums
        return {"eval/loss": loss_sum / users, f"eval/hr@{HIT_RANK}": hits / users}
