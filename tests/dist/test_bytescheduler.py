"""ByteScheduler and US-Byte: updates deferred into the next forward pass must not change what is
learned (float64, momentum, weight decay and a learning rate that changes every step end with
the flat all-reduce's parameters), every rank must issue the same sends in the same order even
when their gradients are ready at different times, and a failing send must reach the trainer."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from benchmarks.op_counts import count
from gradsync.comm.collective import TorchCollective
from gradsync.comm.host_sync import take_counts
from gradsync.comm.solo import SoloCollective
from gradsync.compressors.fp16 import FP16Compressor
from gradsync.compressors.none import NoneCompressor
from gradsync.compressors.topk import TopKCompressor
from gradsync.feedback.none import NoneFeedback
from gradsync.feedback.residual import ResidualFeedback
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from gradsync.schedulers.engine.buckets import Buckets
from gradsync.schedulers.priority.bytescheduler import ByteSchedulerSync
from gradsync.schedulers.priority.config import AGREEMENT
from gradsync.schedulers.priority.usbyte import (
    UsByteSync,
    candidate_partitions,
    forward_before,
    overlap_sizes,
    plan_partitions,
)
from tests.helpers.dist import run_world

STEPS, PER_WORKER = 7, 8
SIZES = [16 * 10, 16, 16 * 16, 16, 4 * 16, 4]  # the model's tensors, in model order
TOTAL = sum(SIZES)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4)
    ).double()


def _compressor(kind: str) -> Any:
    if kind == "fp16":
        return FP16Compressor()
    if kind == "topk":  # selection agreed over the job's collective, inside gradient hooks
        return TopKCompressor(density=0.3, exchange="union")
    return NoneCompressor()


def _sync(name: str, kind: str, options: dict, collective: Any) -> Any:
    components = {
        "compressor": _compressor(kind),
        "feedback": ResidualFeedback() if kind == "topk" else NoneFeedback(),
        "collective": collective,
        "clock": time.perf_counter,
    }
    schedulers = {"allreduce": AllreduceSync, "bytescheduler": ByteSchedulerSync}
    return schedulers.get(name, UsByteSync)(**options, **components)


def _slow_down(model: nn.Module) -> None:
    """Gradients of this rank arrive late, one tensor at a time."""

    def late(grad: torch.Tensor) -> torch.Tensor:
        time.sleep(0.003)
        return grad

    for param in model.parameters():
        param.register_hook(late)


def _train(
    rank: int,
    world_size: int,
    name: str,
    kind: str,
    options: dict,
    *,
    slow_rank: int | None = None,
    flush_at: int | None = None,
    collective: Any = None,
    make_model: Callable[[], nn.Module] = _model,
) -> dict:
    """The training loop's order of calls, with a learning rate that changes every step."""
    model = make_model()
    gen = torch.Generator().manual_seed(1)
    n = STEPS * PER_WORKER * world_size
    x = torch.randn(n, 10, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 4, (n,), generator=gen)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 / (1 + 0.5 * s))
    sync = _sync(name, kind, options, collective or TorchCollective())
    sync.attach(model, opt)
    if slow_rank == rank:
        _slow_down(model)
    extras, sent_bytes = [], 0
    for step in range(STEPS):
        sync.begin(step=step)
        start = step * PER_WORKER * world_size + rank * PER_WORKER
        batch = slice(start, start + PER_WORKER)
        loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
        loss.backward()
        stats = sync.step(step=step, loss=loss.detach())
        opt.zero_grad(set_to_none=True)
        schedule.step()
        extras.append(stats.extra)
        sent_bytes += stats.bytes_sent
        if step == flush_at:  # as before an evaluation or a checkpoint
            sync.flush()
    sync.flush()
    return {
        "params": [p.detach().clone() for p in model.parameters()],
        "sends": sync.send_log() if name != "allreduce" else [],
        "extras": extras,
        "bytes": sent_bytes,
        "bounds": sync.plan.buckets.bounds if name != "allreduce" else (),
    }


CASES: list[tuple[str, str, dict, dict]] = [
    ("bytescheduler", "none", {}, {}),  # one partition of the default 1M elements
    ("bytescheduler", "none", {"partition_size": 50, "credit": 120}, {}),
    ("bytescheduler", "none", {"partition_size": 7, "credit": 1}, {"slow_rank": 1}),
    ("bytescheduler", "none", {"partition_size": 64}, {"slow_rank": 0, "flush_at": 3}),
    ("bytescheduler", "fp16", {"partition_size": 40, "credit": 80}, {}),
    (
        "usbyte",
        "none",
        {
            "min_partition_size": 8,
            "max_partition_size": 128,
            "credit": 200,
            "profile_steps": 2,
            "alpha": 1e-4,
            "beta": 1e-9,
        },
        {"slow_rank": 1},
    ),
    (
        "usbyte",
        "none",
        {"min_partition_size": 16, "max_partition_size": 64, "profile_steps": 1},
        {},
    ),
]
TOPK = ("bytescheduler", "topk", {"partition_size": 60, "credit": 100}, {"slow_rank": 0})


def _train_all(rank: int, world_size: int) -> dict:
    """Every case and its flat reference in one world (spawning ranks costs seconds)."""
    results: dict = {
        ("allreduce", kind): _train(rank, world_size, "allreduce", kind, {})
        for kind in ("none", "fp16")
    }
    for i, (name, kind, options, how) in enumerate(CASES):
        results[i] = _train(rank, world_size, name, kind, options, **how)
    name, kind, options, how = TOPK
    results["topk"] = _train(rank, world_size, name, kind, options, **how)
    return results


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[dict]:
    return run_world(_train_all, 2, tmp_path_factory.mktemp("bytescheduler"))


def _case_id(case: tuple[str, str, dict, dict]) -> str:
    name, kind, options, how = case
    return "-".join([name, kind, *(f"{k}={v}" for k, v in {**options, **how}.items())])


@pytest.mark.dist
@pytest.mark.parametrize("case", range(len(CASES)), ids=[_case_id(c) for c in CASES])
def test_training_equals_the_flat_allreduce(runs, case):
    kind = CASES[case][1]
    initial = [p.detach() for p in _model().parameters()]
    for rank in range(2):
        flat, ours = runs[rank][("allreduce", kind)], runs[rank][case]
        assert any(not torch.equal(a, b) for a, b in zip(flat["params"], initial, strict=True))
        for mine, ref in zip(ours["params"], flat["params"], strict=True):
            torch.testing.assert_close(mine, ref, rtol=0, atol=1e-12)
        assert ours["bytes"] == flat["bytes"]  # every element once per step, nothing else counted


@pytest.mark.dist
@pytest.mark.parametrize("case", range(len(CASES)), ids=[_case_id(c) for c in CASES])
def test_updates_wait_in_the_next_forward_pass_and_sends_overlap_backward(runs, case):
    how = CASES[case][3]
    for rank in range(2):
        extras = runs[rank][case]["extras"]
        assert all(e["sched/late_updates"] == 0 for e in extras)  # each module applied its own
    if "slow_rank" in how:  # its backward is long enough to see sends start during it
        slow = runs[how["slow_rank"]][case]["extras"]
        assert max(e["sched/sent_in_backward"] for e in slow) > 0


@pytest.mark.dist
@pytest.mark.parametrize("case", [*range(len(CASES)), "topk"], ids=[*map(_case_id, CASES), "topk"])
def test_every_rank_sends_the_same_partitions_in_the_same_order(runs, case):
    ours = [runs[rank][case] for rank in range(2)]
    assert ours[0]["sends"] == ours[1]["sends"]
    assert ours[0]["bounds"] == ours[1]["bounds"]
    partitions = [e["sched/partitions"] for e in ours[0]["extras"]]
    assert partitions == [e["sched/partitions"] for e in ours[1]["extras"]]
    for step in range(STEPS):  # every partition of every step exactly once
        sent = sorted(b for s, b in ours[0]["sends"] if s == step)
        assert sent == list(range(int(partitions[step])))


@pytest.mark.dist
def test_a_selection_that_talks_inside_hooks_keeps_the_ranks_together(runs):
    ours = [runs[rank]["topk"] for rank in range(2)]
    initial = [p.detach() for p in _model().parameters()]
    for a, b in zip(ours[0]["params"], ours[1]["params"], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert any(not torch.equal(a, b) for a, b in zip(ours[0]["params"], initial, strict=True))
    assert ours[0]["extras"][-1]["sched/partitions"] > 1


@pytest.mark.dist
def test_usbyte_plans_unequal_partitions_after_profiling(runs):
    for case in (5, 6):
        extras = runs[0][case]["extras"]
        profiled = CASES[case][2]["profile_steps"] + 1  # and a warm-up step
        assert [e["sched/profiling"] for e in extras[:profiled]] == [1.0] * profiled
        assert all(e["sched/profiling"] == 0.0 for e in extras[profiled:])
        assert extras[-1]["sched/model_iter_s"] > 0
        assert extras[-1]["sched/alpha"] >= 0 and extras[-1]["sched/beta_per_byte"] >= 0
    bounds = runs[0][5]["bounds"]
    assert bounds[-1] == TOTAL and len(bounds) > 2


# ---- a failing send -------------------------------------------------------------------------
class _FailingLink(TorchCollective):
    """A process group whose third asynchronous all-reduce fails."""

    calls = 0

    def start_all_reduce(self, payload: Any, *, op: str = "sum") -> Any:
        _FailingLink.calls += 1
        if _FailingLink.calls == 3:
            raise ConnectionError("injected: the link went down")
        return super().start_all_reduce(payload, op=op)


class _FailingCollective(TorchCollective):
    def fork(self, *, interface: str | None = None) -> TorchCollective:
        link = super().fork()
        return _FailingLink(group=link.group, timeout=link.timeout)


def _train_until_it_fails(rank: int, world_size: int) -> str:
    options = {"partition_size": 50, "credit": 100}
    try:
        _train(rank, world_size, "bytescheduler", "none", options, collective=_FailingCollective())
    except RuntimeError as exc:
        assert isinstance(exc.__cause__, ConnectionError)
        return str(exc)
    return "trained without noticing"


@pytest.mark.dist
def test_a_failure_on_the_communication_thread_reaches_the_trainer(tmp_path):
    started = time.perf_counter()
    messages = run_world(_train_until_it_fails, 2, tmp_path, timeout=60)
    assert time.perf_counter() - started < 60
    for message in messages:
        assert "scheduler=bytescheduler: the communication thread failed" in message
        assert "injected: the link went down" in message


# ---- one process: the order of sends, and the planner -----------------------------------------
class _Recorder(SoloCollective):
    """A world of one that remembers what is in flight."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.open: dict[int, int] = {}
        self.most = 0

    def fork(self, *, interface: str | None = None) -> _Recorder:
        return self

    def start_all_reduce(self, payload: Any, *, op: str = "sum") -> Any:
        key = len(self.sizes)
        self.sizes.append(payload[0].numel())
        self.open[key] = payload[0].numel()
        self.most = max(self.most, sum(self.open.values()))

        def finish() -> Any:
            self.open.pop(key, None)
            return payload

        return finish


@pytest.mark.parametrize("credit", [1, 30, 100, 10_000])
def test_ready_partitions_go_input_side_first_within_the_credit(credit):
    torch.set_num_threads(1)
    model, recorder = _model(), _Recorder()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sync = _sync("bytescheduler", "none", {"partition_size": 25, "credit": credit}, recorder)
    sync.attach(model, opt)
    sync.begin(step=0)
    with sync._cond:  # the communication thread sees the whole gradient ready at once
        model(torch.randn(4, 10, dtype=torch.float64)).sum().backward()
        sync.step(step=0)
    sync.flush()
    count = len(sync.plan.buckets)
    assert [b for _, b in sync.send_log()] == list(reversed(range(count)))
    assert recorder.most <= max(credit, 25)
    if credit == 1:
        assert recorder.most == 25  # one at a time (the last partition is smaller)


def test_credit_comes_back_with_no_host_sync_and_still_bounds_the_sends_in_flight():
    """The oldest send is settled on the communication thread (on CUDA its stream then waits
    for that send, and the sends issued after it start once it completed): no host sync is
    passed for credit, yet the credit bounds what is in flight."""
    torch.set_num_threads(1)
    model, recorder = _model(), _Recorder()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sync = _sync("bytescheduler", "none", {"partition_size": 20, "credit": 40}, recorder)
    sync.attach(model, opt)
    take_counts()
    for step in range(3):
        sync.begin(step=step)
        model(torch.randn(4, 10, dtype=torch.float64)).sum().backward()
        sync.step(step=step)
    sync.flush()
    passed = take_counts()
    sync.close()
    assert len(recorder.sizes) == 3 * len(sync.plan.buckets) and TOTAL > 2 * 40
    assert 0 < recorder.most <= 40
    assert set(passed) <= {AGREEMENT}, passed


def test_hooks_copy_gradients_in_one_batched_copy_per_partition_not_one_per_tensor():
    torch.set_num_threads(1)
    model = _model()
    sync = _sync("bytescheduler", "none", {"partition_size": 50}, SoloCollective())
    sync.attach(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for step in range(2):
        sync.begin(step=step)
        loss = model(torch.randn(4, 10, dtype=torch.float64)).sum()
        by_op = count(loss.backward).by_op
        sync.step(step=step)
        assert by_op["copy_"] == 0  # the tensors' copies, one launch each
        assert 0 < by_op["_foreach_copy_"] <= min(len(sync.plan.buckets), len(SIZES))
    sync.flush()
    sync.close()


def test_one_worker_trains_like_the_flat_allreduce():
    torch.set_num_threads(1)
    results = {
        name: _train(0, 1, name, "none", options, collective=SoloCollective())
        for name, options in [("allreduce", {}), ("bytescheduler", {"partition_size": 30})]
    }
    pairs = zip(results["allreduce"]["params"], results["bytescheduler"]["params"], strict=True)
    for ref, mine in pairs:
        torch.testing.assert_close(mine, ref, rtol=0, atol=1e-12)


class _Attention(nn.Module):
    """``nn.MultiheadAttention`` uses its ``out_proj`` without calling it: that module's own
    pre-hook never fires."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.attention = nn.MultiheadAttention(10, 2, batch_first=True)
        self.head = nn.Linear(10, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.view(x.shape[0], 1, 10)
        return self.head(self.attention(tokens, tokens, tokens)[0].squeeze(1))


def test_parameters_a_parent_module_uses_directly_are_updated_before_that_use():
    torch.set_num_threads(1)
    solo = {"collective": SoloCollective(), "make_model": lambda: _Attention().double()}
    results = {
        name: _train(0, 1, name, "none", options, **solo)
        for name, options in [("allreduce", {}), ("bytescheduler", {"partition_size": 30})]
    }
    pairs = zip(results["allreduce"]["params"], results["bytescheduler"]["params"], strict=True)
    for ref, mine in pairs:
        torch.testing.assert_close(mine, ref, rtol=0, atol=1e-12)
    assert all(e["sched/late_updates"] == 0 for e in results["bytescheduler"]["extras"])


def test_the_overlap_rule_grows_partitions_while_the_forward_pass_hides_them():
    sizes, forward = [1000] * 10, [1e-3] * 10  # 1 µs of forward per element
    need = forward_before(sizes, forward)
    assert need(0) == 0 and need(1500) == pytest.approx(1.5e-3)
    grown = overlap_sizes(10_000, need, alpha=1e-5, beta=5e-7, smallest=100, largest=4000)
    assert grown[0] == 100 and sum(grown) == 10_000
    assert grown[1] < grown[2] < grown[3] and max(grown) <= 4000
    # A link slower than the forward pass: after the first, the fewest start-ups.
    slow = overlap_sizes(10_000, need, alpha=1e-3, beta=1e-4, smallest=100, largest=4000)
    assert slow == [100, 4000, 4000, 1900]


def test_the_planner_prefers_small_partitions_near_the_input_when_the_link_keeps_up():
    sizes, forward, backward = [2000] * 8, [2e-3] * 8, [4e-3] * 8
    choice = plan_partitions(
        sizes, forward, backward, alpha=1e-5, beta=5e-7, smallest=100, largest=4000
    )
    buckets = choice.plan.buckets
    assert buckets.total == sum(sizes)
    input_side, output_side = buckets.numel(len(buckets) - 1), buckets.numel(0)
    assert input_side < output_side
    assert choice.plan.order[0] == len(buckets) - 1  # the input side first
    assert choice.iteration > sum(forward) + sum(backward) - 1e-12
    candidates = candidate_partitions(
        sum(sizes), forward_before(sizes, forward), alpha=1e-5, beta=5e-7, smallest=100,
        largest=4000,
    )  # fmt: skip
    assert all(isinstance(c, Buckets) and c.total == sum(sizes) for c in candidates)
    assert buckets in candidates


def test_compressors_that_all_gather_are_rejected():
    components = {
        "compressor": TopKCompressor(density=0.1, exchange="allgather"),
        "feedback": NoneFeedback(),
        "collective": SoloCollective(),
        "clock": time.perf_counter,
    }
    with pytest.raises(ValueError, match="scheduler=bytescheduler all-reduces partitions"):
        ByteSchedulerSync(**components)
    with pytest.raises(ValueError, match="scheduler=usbyte all-reduces partitions"):
        UsByteSync(**components)


@pytest.mark.parametrize(
    ("name", "kind", "options"),
    [
        ("bytescheduler", "topk", {"partition_size": 60}),
        (
            "usbyte",
            "none",
            {"min_partition_size": 8, "max_partition_size": 64, "profile_steps": 1, "alpha": 1e-4,
             "beta": 1e-9},
        ),
    ],
)  # fmt: skip
def test_a_checkpoint_keeps_the_partitions_and_their_residuals(name, kind, options):
    torch.set_num_threads(1)

    def attached() -> Any:
        model = _model()
        sync = _sync(name, kind, options, SoloCollective())
        sync.attach(model, torch.optim.SGD(model.parameters(), lr=0.1))
        return sync, model

    sync, model = attached()
    for step in range(3):
        sync.begin(step=step)
        model(torch.randn(4, 10, dtype=torch.float64)).sum().backward()
        sync.step(step=step)
    sync.flush()
    state = sync.state_dict()
    again, _ = attached()
    again.load_state_dict(state)
    assert again.plan == sync.plan
    assert again.state_dict()["feedback"].keys() == state["feedback"].keys()
    for key, residual in state["feedback"].items():
        torch.testing.assert_close(again.state_dict()["feedback"][key], residual)
    if name == "usbyte":
        assert state["planned"] and not again._synchronous()
        assert state["plan_metrics"]["sched/profiling"] == 0.0  # the planned partitions
        assert state["plan_metrics"]["sched/model_iter_s"] > 0
    else:
        assert state["feedback"]  # top-k leaves residuals behind
