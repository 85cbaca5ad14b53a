"""Pipelined synchronization: the gradient is exchanged group by group while backward runs.

Tensors are taken in backward order (the reverse of ``model.parameters()``, which is also the
order DDP assumes) and split into contiguous groups by a plan. When the last gradient of a group
has been accumulated, a hook launches it (the engine's compensate -> compress -> residual on the
compute side); the scheduler's communication thread exchanges it while backward goes on.
``step()`` waits only for what is still in flight (``time/comm``), then averages, writes the
gradients and steps the optimizer.

Which groups: a ``Planner``. Some plan from the tensor sizes alone (WFBP buckets, LAGS, MGS).
OMGS plans from measurements of the running job, taken over its first steps, during which every
tensor is its own group.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from typing_extensions import Unpack

from gradsync.algorithms.merge_plans import Layers as LayerTimes
from gradsync.algorithms.merge_plans import Plan
from gradsync.schedulers.engine.engine import EngineParts, ExchangeEngine
from gradsync.schedulers.engine.hooks import ModelHooks, hook_model
from gradsync.schedulers.engine.profiling import BackwardProfile
from gradsync.types import Collective, SyncStats

log = logging.getLogger("gradsync")


@dataclass(frozen=True)
class Measurements:
    """What a planner may use: the job's tensors and, after profiling, its timings."""

    sizes: list[int]
    """Elements per tensor, backward order."""
    element_size: int
    density: float
    device: torch.device
    backward: list[float] | None = None
    forward: float = 0.0
    link: Collective | None = None
    """The exchange's process group, for measuring its cost."""
    clock: Callable[[], float] = time.perf_counter
    """The clock a planner's own measurements read: the job's synchronizing clock (on CUDA it
    waits for the device; the wall clock alone would time kernel launches)."""
    selections: list[tuple[int, float]] = field(default_factory=list)
    """(elements, seconds) of each compression during the profiled steps, on this worker."""
    exchanges: list[tuple[float, float]] = field(default_factory=list)
    """(bytes sent, seconds) of each all-gather during the profiled steps, on this worker."""
    write_backs: list[tuple[int, float]] = field(default_factory=list)
    """(groups, seconds) of each profiled step's averaging and write-back, on this worker."""

    def layer_times(self) -> LayerTimes:
        assert self.backward is not None, "profile first"
        return LayerTimes(backward=tuple(self.backward), sizes=tuple(self.sizes))


class Planner(Protocol):
    profile_steps: int
    """Steps to measure (with every tensor its own group) before ``plan`` is called; 0 plans
    from the sizes at once."""

    def plan(self, job: Measurements) -> tuple[Plan, dict[str, float]]:
        """The groups, and metrics that describe the choice (logged every step)."""
        ...


class PipelinedSync(ExchangeEngine):
    def __init__(self, *, planner: Planner, **parts: Unpack[EngineParts]) -> None:
        super().__init__(**parts)
        self.planner = planner
        self._planned = False
        self._plan_metrics: dict[str, float] = {}
        self._profile: BackwardProfile | None = None
        self._reset_profiled_step()

    # ---- set-up -------------------------------------------------------------------------------
    def attach(self, model: nn.Module, optimizer: Optimizer) -> None:
        super().attach(model, optimizer)
        self._reset_profiled_step()
        hooks = ModelHooks(
            on_gradient=self._on_gradient,
            on_forward_start=lambda: self._mark("forward_start"),
            on_forward_end=lambda: self._mark("forward_end"),
        )
        hook_model(model, self._params, hooks)
        if self.planner.profile_steps:
            self._use_plan((1,) * len(self._params), planned=False)  # profiled per tensor
            self._profile = BackwardProfile(backward=[0.0] * len(self._params))
            self.profiling = True
        else:
            self._use_plan(*self.planner.plan(self._measurements()), planned=True)

    def _measurements(self, **timings: Any) -> Measurements:
        first = self._params[0]
        return Measurements(
            sizes=self.sizes(),
            element_size=first.element_size(),
            density=self.compressor.density,
            device=first.device,
            clock=self.clock,
            **timings,
        )

    def _use_plan(
        self, plan: Plan, metrics: Mapping[str, float] | None = None, *, planned: bool
    ) -> None:
        self.use_plan(plan)
        self._planned = planned
        self._plan_metrics = {"sched/groups": float(len(plan)), **(metrics or {})}
        self._waiting = [len(group) for group in self._groups]

    def extra_metrics(self) -> dict[str, float]:
        return dict(self._plan_metrics)

    # ---- one step: hooks launch groups --------------------------------------------------------
    def _reset_profiled_step(self) -> None:
        self._marks: dict[str, float] = {}
        self._ready_at = [0.0] * len(self._params)
        self._last_mark: float | None = None

    def _mark(self, what: str) -> None:
        if self._profile is None:
            return  # only profiled steps are timed per tensor (with the synchronizing clock)
        self._marks[what] = self.clock()
        if what == "forward_end":
            self._last_mark = self._marks[what]

    def _on_gradient(self, index: int) -> None:
        if self._profile is not None:
            # Backward time of this tensor: since the previous hook finished its own work.
            now = self.clock()
            self._ready_at[index] = now - (self._last_mark if self._last_mark is not None else now)
        group = self._group_of[index]
        self._waiting[group] -= 1
        if self._waiting[group] == 0:
            self.launch(group, in_backward=True)
        if self._profile is not None:
            self._last_mark = self.clock()

    def step(self, *, step: int, epoch: int = 0, loss: Tensor | None = None) -> SyncStats:
        stats = super().step(step=step, epoch=epoch, loss=loss)
        self._after_step(step)
        return stats

    def _after_step(self, step: int) -> None:
        self._waiting = [len(group) for group in self._groups]
        profile = self._profile
        if not self._planned and profile is not None:
            forward = self._marks.get("forward_end", 0.0) - self._marks.get("forward_start", 0.0)
            if step > 0 or profile.steps:  # the first step pays for warm-up: leave it out
                profile.add(self._ready_at, max(forward, 0.0))
            if profile.steps >= self.planner.profile_steps:
                self._plan_from_profile(profile)
        self._reset_profiled_step()

    def _plan_from_profile(self, profile: BackwardProfile) -> None:
        device = self._params[0].device
        backward, forward = profile.agreed(self.collective, device)
        job = self._measurements(
            backward=backward,
            forward=forward,
            link=self.collective,
            selections=self.selections,
            exchanges=self.exchanges,
            write_backs=self.write_backs,
        )
        plan, metrics = self.planner.plan(job)
        self._use_plan(plan, metrics, planned=True)
        self._stop_profiling()
        log.info(f"groups planned from {profile.steps} profiled steps: {len(plan)} groups")

    def _stop_profiling(self) -> None:
        self._profile = None
        self.profiling = False
        self.selections, self.exchanges, self.write_backs = [], [], []

    # ---- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            **self.components_state(),
            "plan": list(self._plan),
            "planned": self._planned,
            "plan_metrics": dict(self._plan_metrics),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # A resumed job keeps the groups it had (no new profiling), and their residuals.
        metrics = {k: v for k, v in state["plan_metrics"].items() if k != "sched/groups"}
        self._plan = ()
        self._use_plan(tuple(state["plan"]), metrics, planned=state["planned"])
        self.load_components_state(state)
        if self._planned:
            self._stop_profiling()
