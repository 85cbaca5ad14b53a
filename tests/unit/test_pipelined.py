"""The pipelined scheduler in one process (the world of one worker): hooks, groups, plan
switches and checkpoints, without a process group."""

from __future__ import annotations

import math
import time

import pytest
import torch
from torch import nn

from gradsync.algorithms.merge_plans import OMGS_RULES, Plan
from gradsync.comm.solo import SoloCollective
from gradsync.compressors.topk import TopKCompressor
from gradsync.feedback.residual import ResidualFeedback
from gradsync.schedulers.pipelined.config import OMGS_RULE_NAMES
from gradsync.schedulers.pipelined.pipelined import Measurements, PipelinedSync


class FixedPlanner:
    """Profiles for ``profile_steps`` steps, then plans ``plan``; remembers what it was given
    and the residuals at the moment of the switch."""

    def __init__(self, plan: Plan, profile_steps: int) -> None:
        self.fixed, self.profile_steps = plan, profile_steps
        self.seen: Measurements | None = None
        self.sync: PipelinedSync | None = None
        self.residual_before: torch.Tensor | None = None

    def plan(self, job: Measurements) -> tuple[Plan, dict[str, float]]:
        self.seen = job
        if self.sync is not None:  # planning after profiling: the residuals at the switch
            self.residual_before = _residual(self.sync)
        return self.fixed, {"sched/test": 1.0}


def _residual(sync: PipelinedSync) -> torch.Tensor:
    state = sync.feedback.state_dict()
    return torch.cat([state[f"group{g}"] for g in range(len(state))])


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))  # 4 tensors


def _train(sync: PipelinedSync, model: nn.Module, steps: int) -> list:
    x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
    stats = []
    for step in range(steps):
        sync.begin(step=step)
        nn.functional.cross_entropy(model(x), y).backward()
        stats.append(sync.step(step=step))
        model.zero_grad(set_to_none=True)
    return stats


def _sync(planner: FixedPlanner, model: nn.Module) -> PipelinedSync:
    sync = PipelinedSync(
        compressor=TopKCompressor(density=0.3, exchange="allgather"),
        feedback=ResidualFeedback(),
        collective=SoloCollective(),
        clock=time.perf_counter,
        planner=planner,
    )
    planner.sync = sync
    sync.attach(model, torch.optim.SGD(model.parameters(), lr=0.1))
    return sync


def test_profiled_steps_run_per_tensor_then_the_plan_keeps_every_residual():
    model = _model()
    planner = FixedPlanner((2, 2), profile_steps=2)
    sync = _sync(planner, model)
    stats = _train(sync, model, 3)  # step 0 is warm-up; steps 1-2 profiled, then planned
    after_switch = sync.feedback.state_dict()
    stats += _train(sync, model, 2)
    assert [s.extra["sched/groups"] for s in stats] == [4, 4, 4, 2, 2]
    assert stats[-1].extra["sched/test"] == 1.0
    job = planner.seen
    assert job is not None and job.sizes == [3, 24, 8, 48]  # backward order: output layer first
    assert job.backward is not None and all(t >= 0 for t in job.backward) and job.forward > 0
    # The residual is carried over to the new groups element for element.
    assert planner.residual_before is not None
    assert set(after_switch) == {"group0", "group1"}
    assert after_switch["group0"].numel() == 3 + 24
    # Before: one group per tensor (backward order: sizes 3, 24, 8, 48). After: two groups,
    # each holding its tensors in model order, the output layer's last.
    pieces = planner.residual_before.split([3, 24, 8, 48])
    assert torch.equal(after_switch["group0"], torch.cat([pieces[1], pieces[0]]))
    assert torch.equal(after_switch["group1"], torch.cat([pieces[3], pieces[2]]))


def test_compression_in_hooks_is_counted_inside_backward():
    model = _model()
    sync = _sync(FixedPlanner((4,), profile_steps=1), model)
    stats = _train(sync, model, 3)
    for s in stats:
        assert 0 < s.time_in_backward <= s.time_compress + 1e-9
        assert s.density_actual == pytest.approx(
            sum(max(1, int(0.3 * n)) for n in (3, 24, 8, 48)) / 83
        )


def test_a_checkpoint_keeps_the_plan_and_skips_profiling():
    model = _model()
    planner = FixedPlanner((1, 3), profile_steps=1)
    sync = _sync(planner, model)
    _train(sync, model, 3)
    state = sync.state_dict()
    assert state["plan"] == [1, 3] and state["planned"]
    fresh_planner = FixedPlanner((4,), profile_steps=1)
    restored_model = _model()
    restored = _sync(fresh_planner, restored_model)
    restored.load_state_dict(state)
    stats = _train(restored, restored_model, 2)
    assert [s.extra["sched/groups"] for s in stats] == [2, 2]
    assert fresh_planner.seen is None  # no new profiling after a resume


def test_rule_names_in_the_schema_match_the_planners():
    assert tuple(OMGS_RULES) == OMGS_RULE_NAMES


def test_omgs_fits_its_cost_model_to_the_profiled_steps_themselves():
    from gradsync.schedulers.pipelined.omgs import OmgsPlanner

    density = 0.01
    sizes = [2**k for k in range(10, 18)]
    selections = [(d, 3e-10 * density * d * math.log2(d)) for d in sizes]
    exchanges = [(float(b), 2e-4 + 1e-8 * b) for b in (1e3, 1e4, 1e5, 1e6)]
    job = Measurements(
        sizes=sizes,
        element_size=4,
        density=density,
        device=torch.device("cpu"),
        backward=[1e-3] * len(sizes),
        link=SoloCollective(),
        selections=selections,
        exchanges=exchanges,
    )
    cost = OmgsPlanner("optimal", profile_steps=1, costs=None).cost_model(job)
    assert cost.gamma == pytest.approx(3e-10)
    assert (cost.alpha, cost.beta) == (pytest.approx(2e-4), pytest.approx(1e-8))
    # One exchange size only: α and β cannot be told apart, so they are microbenchmarked.
    sparse = Measurements(**{**job.__dict__, "exchanges": [(1e3, 1e-3)] * 3})
    fallback = OmgsPlanner("optimal", profile_steps=1, costs=None).cost_model(sparse)
    assert fallback.gamma > 0 and fallback.beta >= 0


def test_terngrad_keeps_the_model_classifier_float_however_it_is_grouped():
    """The model's last two tensors travel as float32 whether they share a group or not."""
    from gradsync.compressors.terngrad import TernGradCompressor

    class Recording(TernGradCompressor):
        floats: list[int]

        def compress(self, grad, **options):
            payload, ctx = super().compress(grad, **options)
            self.floats += ctx.sizes[ctx.quantized :]
            return payload, ctx

    for plan in [(4,), (1, 1, 1, 1), (1, 3), (2, 2)]:
        model = _model()
        compressor = Recording()
        compressor.floats = []
        sync = PipelinedSync(
            compressor=compressor,
            feedback=ResidualFeedback(),
            collective=SoloCollective(),
            clock=time.perf_counter,
            planner=FixedPlanner(plan, profile_steps=0),
        )
        sync.attach(model, torch.optim.SGD(model.parameters(), lr=0.1))
        _train(sync, model, 1)
        assert sorted(compressor.floats) == [3, 24], plan  # the 8→3 layer's bias and weight
