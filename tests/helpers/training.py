"""A tiny float64 classifier and its data, shared by the tests that train on real ranks and
compare schedulers' parameters to a reference."""

from __future__ import annotations

import torch
from torch import Tensor, nn

PER_WORKER = 8


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4)
    ).double()


def tiny_data(steps: int, world_size: int) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(1)
    n = steps * PER_WORKER * world_size
    return torch.randn(n, 10, generator=gen, dtype=torch.float64), torch.randint(
        0, 4, (n,), generator=gen
    )


def local_loss(
    model: nn.Module, data: tuple[Tensor, Tensor], step: int, rank: int, world_size: int
) -> Tensor:
    """Rank ``rank``'s share of step ``step``'s global batch."""
    x, y = data
    start = step * PER_WORKER * world_size + rank * PER_WORKER
    batch = slice(start, start + PER_WORKER)
    return nn.functional.cross_entropy(model(x[batch]), y[batch])


def sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
