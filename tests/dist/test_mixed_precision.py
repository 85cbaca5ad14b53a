"""fp16's loss scaling on real gloo ranks, through the exchange engine.

One world runs every scenario (module fixture); the tests check what each left behind:

- a step whose gradients overflow on one worker is skipped on every worker: residuals,
  compressor state, optimizer state and parameters as before it, the scale halved alike
  everywhere, training going on after it (top-k with error feedback, fp16 autocast, the
  overflow injected as ``GRADSYNC_FAULT=1:step:inf`` does; a flat and an overlapping scheduler);
- every worker skips even when the compression drops the overflowing element (random-k, one inf
  that no worker sends): only the agreed flag tells the others;
- without an overflow, the gradients the compressor sees under a loss scale (fp32 arithmetic,
  so only the scale differs) equal those of plain fp32, bit for bit, and so do the residuals
  and the parameters.
"""

from __future__ import annotations

import copy
import itertools
import time
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from gradsync.comm.collective import TorchCollective
from gradsync.compressors.randomk import RandomKCompressor
from gradsync.compressors.sparse import density_k
from gradsync.compressors.topk import TopKCompressor
from gradsync.config.schema import Precision
from gradsync.feedback.residual import ResidualFeedback
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from gradsync.schedulers.engine.engine import ExchangeEngine
from gradsync.schedulers.engine.loss_scale import LossScale
from gradsync.schedulers.pipelined.lags import LagsSync
from gradsync.train.faults import FaultPlan
from gradsync.train.precision import MixedPrecision
from gradsync.types import GroupInfo, Payload
from tests.helpers.dist import run_world
from tests.helpers.training import local_loss, tiny_data

pytestmark = pytest.mark.dist

WORKERS, STEPS, FAULT_STEP = 2, 5, 2
SCHEDULERS: dict[str, tuple[type[ExchangeEngine], str]] = {
    "allreduce": (AllreduceSync, "allgather"),
    "lags": (LagsSync, "allgather"),
    # Its selection talks (a gather of indices): its groups are compressed on the
    # communication thread, unscaling and snapshots with them.
    "lags-union": (LagsSync, "union"),
}
"""A scheduler and top-k's ``exchange``, by case."""
INITIAL_SCALE = 65536.0


class CountingTopK(TopKCompressor):
    """Top-k that keeps state across steps (how many groups it compressed), as a compressor
    with momenta or a generator does, and shows the gradients it was given."""

    def __init__(self, exchange: str) -> None:
        super().__init__(density=0.1, exchange=exchange)
        self.calls = 0
        self.seen: list[Tensor] = []

    def compress(self, grad: Tensor, *, group: GroupInfo) -> tuple[Payload, Any]:
        self.calls += 1
        self.seen.append(grad.detach().clone())
        return super().compress(grad, group=group)

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def load_state_dict(self, state: Any) -> None:
        self.calls = state.get("calls", 0)

    def snapshot(self) -> object:
        return self.calls

    def restore(self, snapshot: object) -> None:
        assert isinstance(snapshot, int)
        self.calls = snapshot


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4)
    )


def _data() -> tuple[Tensor, Tensor]:
    x, y = tiny_data(STEPS, WORKERS)
    return x.float(), y


def _optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)


def _engine(kind: type[ExchangeEngine], compressor: Any, loss_scale: LossScale | None) -> Any:
    return kind(
        compressor=compressor,
        feedback=ResidualFeedback(),
        collective=TorchCollective(),
        clock=time.perf_counter,
        loss_scale=loss_scale,
    )


def _state(sync: Any, optimizer: torch.optim.Optimizer, model: nn.Module) -> dict[str, Any]:
    return {
        "feedback": sync.feedback.state_dict(),
        "compressor": copy.deepcopy(sync.compressor.state_dict()),
        "optimizer": copy.deepcopy(optimizer.state_dict()["state"]),
        "params": [p.detach().clone() for p in model.parameters()],
    }


def _skip_run(rank: int, kind: type[ExchangeEngine], exchange: str) -> dict[str, Any]:
    """fp16 autocast, top-k with error feedback; rank 1's loss is inf at FAULT_STEP."""
    model, data = _model(), _data()
    optimizer = _optimizer(model)
    precision = MixedPrecision(Precision.fp16, torch.device("cpu"))
    sync = _engine(kind, CountingTopK(exchange), precision.loss_scale)
    sync.attach(model, optimizer)
    fault = FaultPlan(rank=rank, spec=f"1:{FAULT_STEP}:inf", slow_spec="")
    assert precision.loss_scale is not None
    result: dict[str, Any] = {"scales": []}
    for step in range(STEPS):
        if step == FAULT_STEP:
            result["before"] = _state(sync, optimizer, model)
        seen_before = len(sync.compressor.seen)  # an overlapping scheduler compresses in backward
        sync.begin(step=step)
        with precision.autocast():
            loss = local_loss(model, data, step, rank, WORKERS)
        precision.backward(fault.differentiated(loss, step))
        if step == FAULT_STEP + 1:  # what the compressor should see: gradients + residuals
            unscaled = sum(p.grad.double().sum() for p in model.parameters() if p.grad is not None)
            kept = sum(r.double().sum() for r in result["after"]["feedback"].values())
            result["next_expected"] = float(unscaled) / precision.loss_scale.value() + float(kept)
        sync.step(step=step)
        optimizer.zero_grad(set_to_none=True)
        if step == FAULT_STEP:
            result["after"] = _state(sync, optimizer, model)
        if step == FAULT_STEP + 1:
            seen = sync.compressor.seen[seen_before:]
            result["next_seen"] = float(sum(t.double().sum() for t in seen))
        result["scales"].append(precision.loss_scale.value())
    sync.close()
    result["final"] = [p.detach().clone() for p in model.parameters()]
    return result


def _dropped_inf_run(rank: int) -> dict[str, Any]:
    """Random-k (error feedback); at FAULT_STEP rank 1 has one inf, at an element random-k does
    not send, so only rank 1 can see it."""
    model, data = _model(), _data()
    optimizer = _optimizer(model)
    loss_scale = LossScale(torch.device("cpu"))
    compressor = RandomKCompressor(density=0.05)
    sync = _engine(AllreduceSync, compressor, loss_scale)
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    k = density_k(compressor.density, total)
    sent = compressor.agree(
        torch.empty(total), name=sync.group_name(0), step=FAULT_STEP, sizes=[], k=k
    )
    unsent = next(i for i in range(total) if i not in set(sent.tolist()))
    offsets = list(itertools.accumulate((p.numel() for p in params), initial=0))
    holder = max(i for i in range(len(params)) if offsets[i] <= unsent)
    step_now = [0]

    def overflow(param: Tensor) -> None:
        if rank == 1 and step_now[0] == FAULT_STEP:
            assert param.grad is not None
            param.grad.view(-1)[unsent - offsets[holder]] = float("inf")

    params[holder].register_post_accumulate_grad_hook(overflow)  # before the engine's hooks
    sync.attach(model, optimizer)
    result: dict[str, Any] = {}
    for step in range(FAULT_STEP + 1):
        step_now[0] = step
        if step == FAULT_STEP:
            result["before"] = _state(sync, optimizer, model)
        sync.begin(step=step)
        loss_scale.scale(local_loss(model, data, step, rank, WORKERS)).backward()
        sync.step(step=step)
        optimizer.zero_grad(set_to_none=True)
    result["after"] = _state(sync, optimizer, model)
    result["local_overflow"] = rank == 1  # by construction: only rank 1 had an inf
    result["scale"] = loss_scale.value()
    sync.close()
    return result


def _scaled_or_not_run(
    rank: int, kind: type[ExchangeEngine], exchange: str, scaled: bool
) -> dict[str, Any]:
    """fp32 arithmetic, no overflow: with the loss scaled (the fp16 path) or not."""
    model, data = _model(), _data()
    optimizer = _optimizer(model)
    loss_scale = LossScale(torch.device("cpu")) if scaled else None
    compressor = CountingTopK(exchange)
    sync = _engine(kind, compressor, loss_scale)
    sync.attach(model, optimizer)
    for step in range(3):
        sync.begin(step=step)
        loss = local_loss(model, data, step, rank, WORKERS)
        (loss if loss_scale is None else loss_scale.scale(loss)).backward()
        sync.step(step=step)
        optimizer.zero_grad(set_to_none=True)
    sync.close()
    return {
        "seen": compressor.seen,
        "feedback": sync.feedback.state_dict(),
        "params": [p.detach().clone() for p in model.parameters()],
        "scale": None if loss_scale is None else loss_scale.value(),
    }


def _all_scenarios(rank: int, world_size: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    results: dict[str, Any] = {"dropped": _dropped_inf_run(rank)}
    for name, (kind, exchange) in SCHEDULERS.items():
        results[f"skip/{name}"] = _skip_run(rank, kind, exchange)
        results[f"fp32/{name}"] = _scaled_or_not_run(rank, kind, exchange, scaled=False)
        results[f"scaled/{name}"] = _scaled_or_not_run(rank, kind, exchange, scaled=True)
    return results


@pytest.fixture(scope="module")
def worlds(tmp_path_factory) -> list[dict[str, Any]]:
    return run_world(_all_scenarios, WORKERS, tmp_path_factory.mktemp("amp"), timeout=240)


def _assert_equal(got: Any, want: Any, what: str) -> None:
    """Bit-for-bit equality of nested dicts/lists of tensors and numbers."""
    if isinstance(want, dict):
        assert got.keys() == want.keys(), what
        for key in want:
            _assert_equal(got[key], want[key], f"{what}.{key}")
    elif isinstance(want, list | tuple):
        assert len(got) == len(want), what
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            _assert_equal(a, b, f"{what}[{i}]")
    elif isinstance(want, Tensor):
        assert torch.equal(got, want), what
    else:
        assert got == want, what


@pytest.mark.parametrize("scheduler", list(SCHEDULERS))
def test_an_overflow_on_one_worker_skips_the_step_on_every_worker(worlds, scheduler):
    runs = [world[f"skip/{scheduler}"] for world in worlds]
    for rank, run in enumerate(runs):
        before, after = run["before"], run["after"]
        assert before["feedback"], "residuals exist before the skipped step"
        assert before["optimizer"], "momentum exists before the skipped step"
        assert before["compressor"]["calls"] > 0
        _assert_equal(after, before, f"rank {rank}")
        # The scale halves at the overflowing step, and only there.
        want = [INITIAL_SCALE] * FAULT_STEP + [INITIAL_SCALE / 2] * (STEPS - FAULT_STEP)
        assert run["scales"] == want
        # The step after compensates with the residuals the skip gave back (the engine's reused
        # buffers must not hold them by then).
        assert run["next_seen"] == pytest.approx(run["next_expected"], rel=1e-5)
        # Training goes on afterwards, with finite parameters.
        moved = [not torch.equal(a, b) for a, b in zip(run["final"], after["params"], strict=True)]
        assert all(moved) and all(torch.isfinite(p).all() for p in run["final"])
    for run in runs[1:]:
        _assert_equal(run["final"], runs[0]["final"], "workers agree on the parameters")


def test_every_worker_skips_an_overflow_that_no_worker_sent(worlds):
    runs = [world["dropped"] for world in worlds]
    assert [run["local_overflow"] for run in runs] == [False, True]
    for rank, run in enumerate(runs):
        assert run["before"]["feedback"]
        _assert_equal(run["after"], run["before"], f"rank {rank}")
        assert run["scale"] == INITIAL_SCALE / 2


@pytest.mark.parametrize("scheduler", list(SCHEDULERS))
def test_under_a_loss_scale_the_compressor_sees_the_fp32_gradients(worlds, scheduler):
    for world in worlds:
        plain, scaled = world[f"fp32/{scheduler}"], world[f"scaled/{scheduler}"]
        assert scaled["scale"] == INITIAL_SCALE, "no step overflowed"
        assert plain["seen"] and plain["feedback"]
        _assert_equal(scaled["seen"], plain["seen"], "compressor inputs")
        _assert_equal(scaled["feedback"], plain["feedback"], "residuals")
        _assert_equal(scaled["params"], plain["params"], "parameters")
