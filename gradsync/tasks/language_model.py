"""Next-token prediction; perplexity = exp(mean cross-entropy per token)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gradsync.data.spec import DataSpec


class LanguageModelTask:
    eval_keys = ("loss_sum", "tokens")

    def __init__(self, *, spec: DataSpec) -> None:
        self.vocab_size = spec.vocab_size
        self.seq_len = spec.seq_len

    def example_batch(self, batch_size: int) -> tuple[Tensor, ...]:
        tokens = torch.zeros(batch_size, self.seq_len, dtype=torch.long)
        return tokens, tokens

    def _token_loss(self, model: nn.Module, batch: tuple[Tensor, ...], reduction: str) -> Tensor:
        inputs, targets = batch
        logits = model(inputs)
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction=reduction
        )

    def loss(self, model: nn.Module, batch: tuple[Tensor, ...]) -> Tensor:
        return self._token_loss(model, batch, "mean")

    @torch.no_grad()
    def eval_sums(self, model: nn.Module, batch: tuple[Tensor, ...]) -> list[float]:
        return [self._token_loss(model, batch, "sum").item(), float(batch[1].numel())]

    def eval_metrics(self, sums: list[float]) -> dict[str, float]:
        loss_sum, tokens = sums
        loss = loss_sum / tokens
        return {"eval/loss": loss, "eval/perplexity": math.exp(min(loss, 700.0))}
