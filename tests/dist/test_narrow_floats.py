"""compressor=fp16/bf16 against PyTorch DDP's ``fp16_compress_hook`` and ``bf16_compress_hook``
on two real gloo ranks: the same parameters after training, bit for bit, and no overflow where
the hook has none (each worker's values are divided by the number of workers before the sum)."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import (
    bf16_compress_hook,
    fp16_compress_hook,
)

from gradsync.comm.collective import TorchCollective
from gradsync.compressors.bf16 import BF16Compressor
from gradsync.compressors.fp16 import FP16Compressor
from gradsync.feedback.none import NoneFeedback
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from tests.helpers.dist import run_world

pytestmark = pytest.mark.dist

WORKERS, STEPS, PER_WORKER = 2, 5, 8
NARROW = {
    "fp16": (FP16Compressor, fp16_compress_hook),
    "bf16": (BF16Compressor, bf16_compress_hook),
}
LARGE = 40_000.0  # below fp16's largest value (65504), but not twice over


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 4))


def _batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(STEPS, WORKERS, PER_WORKER, 10, generator=gen)
    y = torch.randint(0, 4, (STEPS, WORKERS, PER_WORKER), generator=gen)
    return [(x[step, rank], y[step, rank]) for step in range(STEPS)]


def _ours(rank: int, name: str, model: nn.Module, losses: list) -> list[torch.Tensor]:
    """Averaged gradients of every step under scheduler=allreduce and ``compressor=name``."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sync = AllreduceSync(
        compressor=NARROW[name][0](),
        feedback=NoneFeedback(),
        collective=TorchCollective(),
        clock=time.perf_counter,
    )
    sync.attach(model, opt)
    grads = []
    for step, loss in enumerate(losses):
        loss(model).backward()
        sync.step(step=step)
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
        opt.zero_grad(set_to_none=True)
    return grads


def _ddp(rank: int, name: str, model: nn.Module, losses: list) -> list[torch.Tensor]:
    ddp = nn.parallel.DistributedDataParallel(model)
    ddp.register_comm_hook(None, NARROW[name][1])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    grads = []
    for loss in losses:
        loss(ddp).backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
        opt.step()
        opt.zero_grad(set_to_none=True)
    return grads


def _cross_entropy(x: torch.Tensor, y: torch.Tensor):
    return lambda model: nn.functional.cross_entropy(model(x), y)


def _large(model: nn.Module) -> torch.Tensor:
    """A loss whose gradient is LARGE in every weight."""
    return model(torch.ones(1, 4)).sum() * LARGE


def _both(rank: int, world_size: int) -> dict:
    training = [_cross_entropy(x, y) for x, y in _batches(rank)]
    return {
        (name, way, case): train(rank, name, model(), losses)
        for name in NARROW
        for way, train in (("ours", _ours), ("ddp", _ddp))
        for case, model, losses in (
            ("training", _model, training),
            ("large", lambda: nn.Linear(4, 1, bias=False), [_large]),
        )
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> list[dict]:
    return run_world(_both, WORKERS, tmp_path_factory.mktemp("narrow"))


@pytest.mark.parametrize("name", list(NARROW))
def test_training_equals_ddp_with_the_compress_hook(world, name):
    for rank in world:
        ours, theirs = rank[(name, "ours", "training")], rank[(name, "ddp", "training")]
        assert len(ours) == len(theirs) == STEPS
        for step, (mine, ref) in enumerate(zip(ours, theirs, strict=True)):
            assert torch.equal(mine, ref), f"{name} step {step}"


@pytest.mark.parametrize("name", list(NARROW))
def test_values_near_the_narrow_limit_average_without_overflow(world, name):
    for rank in world:
        (ours,), (theirs,) = rank[(name, "ours", "large")], rank[(name, "ddp", "large")]
        assert torch.equal(ours, theirs)
        # Both workers sent LARGE, as the wire type holds it (bf16 rounds it to 39936).
        wire = NARROW[name][0].wire_dtype
        assert torch.equal(ours, torch.full_like(ours, LARGE).to(wire).to(ours.dtype))
