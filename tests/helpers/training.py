"""A tiny float64 classifier and its data, shared by the tests that train on real ranks and
compare schedulers' parameters to a reference."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
from torch import Tensor, nn

from gradsync.types import SyncModel

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


def on_device(data: tuple[Tensor, Tensor], device: torch.device) -> tuple[Tensor, Tensor]:
    x, y = data
    return x.to(device), y.to(device)


def train_synced(
    sync: SyncModel,
    rank: int,
    world_size: int,
    steps: int,
    device: torch.device,
    around_step: Callable[[int], AbstractContextManager[object]] = lambda _: nullcontext(),
) -> list[Tensor]:
    """The tiny model trained ``steps`` steps on ``device`` with ``sync`` exchanging and
    updating, as the training loop drives it, each step inside ``around_step(step)``; its
    parameters, on the CPU."""
    model = tiny_model().to(device)
    data = on_device(tiny_data(steps, world_size), device)
    optimizer = sgd(model)
    sync.attach(model, optimizer)
    for step in range(steps):
        with around_step(step):
            sync.begin(step=step)
            loss = local_loss(model, data, step, rank, world_size)
            loss.backward()
            sync.step(step=step, loss=loss.detach())
            optimizer.zero_grad(set_to_none=True)
    sync.flush()
    sync.close()
    return [p.detach().cpu() for p in model.parameters()]


def train_ddp(rank: int, world_size: int, steps: int, device: torch.device) -> list[Tensor]:
    """The same training under PyTorch DDP (the reference of dense data-parallel SGD); its
    parameters, on the CPU."""
    model = tiny_model().to(device)
    data = on_device(tiny_data(steps, world_size), device)
    ddp = nn.parallel.DistributedDataParallel(
        model, device_ids=[device] if device.type == "cuda" else None
    )
    optimizer = sgd(ddp)
    for step in range(steps):
        local_loss(ddp, data, step, rank, world_size).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return [p.detach().cpu() for p in model.parameters()]
