"""``compressor=powersgd`` against PyTorch's own ``powerSGD_hook`` on real gloo ranks.

The same model, data, seeds and one bucket: DDP with the hook, and gradsync's WFBP with
``compressor=powersgd`` (one group), train 20 steps in float64; the parameters must agree to
float tolerance for every option combination below. A run resumed from the compressor's
``state_dict`` at step 10 must equal the uninterrupted one, bit for bit. The initial Q's go to
the matrices in the order their gradients become ready, as DDP's rebuilt bucket holds them:
so the runs also agree on a model that declares its output layer first, and where biases are
compressed too (``min_compression_rate=0.5``: DDP has each weight's gradient before its bias').
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState, powerSGD_hook

from gradsync.comm.collective import TorchCollective
from gradsync.compressors.powersgd import PowerSGDCompressor
from gradsync.feedback.none import NoneFeedback
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from gradsync.schedulers.pipelined.wfbp import WfbpSync
from tests.helpers.dist import run_world

pytestmark = pytest.mark.dist

WORKERS, STEPS, START, PER_WORKER, SEED = 2, 20, 3, 8, 5
ONE_BUCKET_MB = 64.0  # the model is far smaller: one bucket in DDP and one group here
# (rank, use_error_feedback, warm_start): Gram-Schmidt at ranks 1 and 2, QR at rank 3.
COMBINATIONS = [(1, True, True), (2, False, False), (3, True, True), (2, True, False)]


class HeadFirst(nn.Module):
    """The output layer declared before the body: ``parameters()`` lists it first, though its
    gradient is the first one ready."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(16, 3)
        self.body = nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x.flatten(1)[:, :12]))


def _head_first() -> nn.Module:
    torch.manual_seed(0)
    return HeadFirst().double()


ORDER_CASES = {  # name: (model, min_compression_rate, scheduler)
    "head-first/wfbp": (_head_first, 2.0, "wfbp"),
    "head-first/allreduce": (_head_first, 2.0, "allreduce"),
    "biases-compressed/wfbp": (lambda: _model(), 0.5, "wfbp"),
}


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(  # kernels and weights compressed; biases and the small weight not
        nn.Conv2d(3, 6, 3),
        nn.Tanh(),
        nn.Flatten(),
        nn.Linear(6 * 4 * 4, 16),
        nn.Tanh(),
        nn.Linear(16, 16),
        nn.Tanh(),
        nn.Linear(16, 16),  # a second tensor of one shape: P and Q are laid out by shape
        nn.Tanh(),
        nn.Linear(16, 3),
    ).double()


def _batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(PER_WORKER, 3, 6, 6, generator=gen, dtype=torch.float64)
    return x, torch.randint(0, 3, (PER_WORKER,), generator=gen)


def _optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)


def _compressor(rank: int, feedback: bool, warm: bool, rate: float = 2.0) -> PowerSGDCompressor:
    return PowerSGDCompressor(
        rank=rank,
        start_step=START,
        use_error_feedback=feedback,
        warm_start=warm,
        seed=SEED,
        min_compression_rate=rate,
    )


def _sync(compressor: PowerSGDCompressor, scheduler: str = "wfbp") -> WfbpSync | AllreduceSync:
    parts: dict[str, Any] = {
        "compressor": compressor,
        "feedback": NoneFeedback(),
        "collective": TorchCollective(),
        "clock": time.perf_counter,
    }
    if scheduler == "allreduce":
        return AllreduceSync(**parts)
    return WfbpSync(**parts, bucket_mb=ONE_BUCKET_MB, first_bucket_mb=ONE_BUCKET_MB)


def _gradsync(
    rank: int,
    option: tuple[int, bool, bool],
    steps: range,
    state: Any = None,
    case: tuple[Any, float, str] = (_model, 2.0, "wfbp"),
) -> Any:
    make_model, rate, scheduler = case
    model = make_model()
    optimizer = _optimizer(model)
    compressor = _compressor(*option, rate=rate)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        compressor.load_state_dict(state["compressor"])
    sync = _sync(compressor, scheduler)
    sync.attach(model, optimizer)
    for step in steps:
        sync.begin(step=step)
        x, y = _batch(step, rank)
        nn.functional.cross_entropy(model(x), y).backward()
        sync.step(step=step)
        optimizer.zero_grad(set_to_none=True)
    sync.close()
    return {
        "params": [p.detach().clone() for p in model.parameters()],
        "model": copy.deepcopy(model.state_dict()),
        "optimizer": copy.deepcopy(optimizer.state_dict()),
        "compressor": compressor.state_dict(),
    }


def _ddp(
    rank: int, option: tuple[int, bool, bool], case: tuple[Any, float, str] = (_model, 2.0, "")
) -> list[torch.Tensor]:
    approximation_rank, feedback, warm = option
    make_model, rate, _ = case
    model = make_model()
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=ONE_BUCKET_MB)
    state = PowerSGDState(
        process_group=None,
        matrix_approximation_rank=approximation_rank,
        start_powerSGD_iter=START,
        min_compression_rate=rate,
        use_error_feedback=feedback,
        warm_start=warm,
        random_seed=SEED,
    )
    ddp.register_comm_hook(state, powerSGD_hook)
    optimizer = _optimizer(ddp)
    for step in range(STEPS):
        x, y = _batch(step, rank)
        nn.functional.cross_entropy(ddp(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()]


def _world(rank: int, world_size: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for option in COMBINATIONS:
        results[f"ddp/{option}"] = _ddp(rank, option)
        results[f"ours/{option}"] = _gradsync(rank, option, range(STEPS))["params"]
    option = COMBINATIONS[0]
    for name, case in ORDER_CASES.items():
        results[f"ddp/{name}"] = _ddp(rank, option, case)
        results[f"ours/{name}"] = _gradsync(rank, option, range(STEPS), case=case)["params"]
    halfway = _gradsync(rank, option, range(STEPS // 2))
    results["resumed"] = _gradsync(rank, option, range(STEPS // 2, STEPS), state=halfway)["params"]
    return results


@pytest.fixture(scope="module")
def worlds(tmp_path_factory) -> list[dict[str, Any]]:
    return run_world(_world, WORKERS, tmp_path_factory.mktemp("powersgd"), timeout=240)


@pytest.mark.parametrize(
    "option", COMBINATIONS, ids=[f"r{r}-ef{e:d}-warm{w:d}" for r, e, w in COMBINATIONS]
)
def test_powersgd_trains_as_pytorchs_hook(worlds, option):
    initial = [p.detach() for p in _model().parameters()]
    for world in worlds:
        ours, theirs = world[f"ours/{option}"], world[f"ddp/{option}"]
        assert any(not torch.equal(a, b) for a, b in zip(ours, initial, strict=True))
        for mine, reference in zip(ours, theirs, strict=True):
            torch.testing.assert_close(mine, reference, rtol=1e-9, atol=1e-10)
    for mine, other in zip(worlds[0][f"ours/{option}"], worlds[1][f"ours/{option}"], strict=True):
        assert torch.equal(mine, other), "the workers hold one model"


def test_a_resumed_run_equals_the_uninterrupted_one(worlds):
    option = COMBINATIONS[0]
    for world in worlds:
        for resumed, whole in zip(world["resumed"], world[f"ours/{option}"], strict=True):
            assert torch.equal(resumed, whole)


@pytest.mark.parametrize("name", list(ORDER_CASES))
def test_initial_qs_follow_the_order_gradients_become_ready(worlds, name):
    initial = [p.detach() for p in ORDER_CASES[name][0]().parameters()]
    for world in worlds:
        ours, theirs = world[f"ours/{name}"], world[f"ddp/{name}"]
        assert any(not torch.equal(a, b) for a, b in zip(ours, initial, strict=True))
        for mine, reference in zip(ours, theirs, strict=True):
            torch.testing.assert_close(mine, reference, rtol=1e-9, atol=1e-10)
