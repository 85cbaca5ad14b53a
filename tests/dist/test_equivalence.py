"""The correctness anchor: dense gradsync training == one big batch == PyTorch DDP.

N gloo workers, each on its slice b of the global batch, must end with the same parameters as
one process training on the concatenated N·b batch, and as DistributedDataParallel on the same
slices. float64 makes the tolerance tight enough to catch a wrong average (a missing /N, a
gradient applied twice, momentum applied before the exchange).
"""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from gradsync.comm.collective import TorchCollective
from gradsync.compressors.none import NoneCompressor
from gradsync.feedback.none import NoneFeedback
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from tests.helpers.dist import run_world

pytestmark = pytest.mark.dist

STEPS, PER_WORKER = 6, 8


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 4)).double()


def _data(world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    n = STEPS * PER_WORKER * world_size
    x = torch.randn(n, 10, generator=gen, dtype=torch.float64)
    return x, torch.randint(0, 4, (n,), generator=gen)


def _optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(
        model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3
    )


def _global_batch(step: int, world_size: int) -> slice:
    size = PER_WORKER * world_size
    return slice(step * size, (step + 1) * size)


def _local_batch(step: int, rank: int, world_size: int) -> slice:
    start = step * PER_WORKER * world_size + rank * PER_WORKER
    return slice(start, start + PER_WORKER)


def _train_gradsync(rank: int, world_size: int) -> list[torch.Tensor]:
    model, (x, y) = _model(), _data(world_size)
    opt = _optimizer(model)
    sync = AllreduceSync(
        compressor=NoneCompressor(),
        feedback=NoneFeedback(),
        collective=TorchCollective(),
        clock=time.perf_counter,
    )
    sync.attach(model, opt)
    for step in range(STEPS):
        s = _local_batch(step, rank, world_size)
        nn.functional.cross_entropy(model(x[s]), y[s]).backward()
        sync.step(step=step)
        opt.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()]


def _train_ddp(rank: int, world_size: int) -> list[torch.Tensor]:
    model, (x, y) = _model(), _data(world_size)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = _optimizer(ddp)
    for step in range(STEPS):
        s = _local_batch(step, rank, world_size)
        nn.functional.cross_entropy(ddp(x[s]), y[s]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()]


def _train_single(world_size: int) -> list[torch.Tensor]:
    model, (x, y) = _model(), _data(world_size)
    opt = _optimizer(model)
    for step in range(STEPS):
        s = _global_batch(step, world_size)
        nn.functional.cross_entropy(model(x[s]), y[s]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("world_size", [2, 3])
def test_dense_allreduce_equals_big_batch_and_ddp(tmp_path, world_size):
    ours = run_world(_train_gradsync, world_size, tmp_path / "ours")
    ddp = run_world(_train_ddp, world_size, tmp_path / "ddp")
    single = _train_single(world_size)
    initial = list(_model().parameters())
    moved = [not torch.equal(a, b) for a, b in zip(single, initial, strict=True)]
    assert any(moved), "training changed nothing"
    for rank in range(world_size):
        for mine, ref, theirs in zip(ours[rank], single, ddp[rank], strict=True):
            torch.testing.assert_close(mine, ref, rtol=0, atol=1e-12)
            torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-12)
