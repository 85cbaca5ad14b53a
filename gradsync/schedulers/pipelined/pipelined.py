"""Pipelined synchronization: the gradient is exchanged group by group while backward runs.

Tensors are taken in backward order (the reverse of ``model.parameters()``, which is also the
order DDP assumes) and split into contiguous groups by a plan. When the last gradient of a group
has been accumulated, a hook compensates it with the error-feedback residual, compresses it and
keeps the new residual on the compute thread. It then hands the payload to a communication
thread, which exchanges it over a process group of its own while backward goes on.
``step()`` waits only for what is still in flight (``time/comm``), then averages, writes the
gradients and steps the optimizer.

Which groups: a ``Planner``. Some plan from the tensor sizes alone (WFBP buckets, LAGS, MGS).
OMGS plans from measurements of the running job, taken over its first steps, during which every
tensor is its own group.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from gradsync.algorithms.merge_plans import Layers as LayerTimes
from gradsync.algorithms.merge_plans import Plan, check_plan, groups_of
from gradsync.schedulers.engine.combine import combine
from gradsync.schedulers.engine.components import SyncComponents, gradient_of
from gradsync.schedulers.engine.exchanges import Exchanges
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
    selections: list[tuple[int, float]] = field(default_factory=list)
    """(elements, seconds) of each compression during the profiled steps, on this worker."""
    exchanges: list[tuple[float, float]] = field(default_factory=list)
    """(bytes sent, seconds) of each all-gather during the profiled steps, on this worker."""

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


class PipelinedSync(SyncComponents):
    def __init__(self, *, planner: Planner, **components: Any) -> None:
        super().__init__(**components)
        self.planner = planner
        self._params: list[nn.Parameter] = []
        self._optimizer: Optimizer | None = None
        self._link: Exchanges | None = None
        self._plan: Plan = ()
        self._groups: list[range] = []
        self._planned = False
        self._plan_metrics: dict[str, float] = {}
        self._profile: BackwardProfile | None = None
        self._step, self._epoch = 0, 0
        self._reset_step()

    # ---- set-up -------------------------------------------------------------------------------
    def attach(self, model: nn.Module, optimizer: Optimizer) -> None:
        self._params = [p for p in model.parameters() if p.requires_grad][::-1]
        self._optimizer = optimizer
        self._link = Exchanges(self.collective.fork())
        for index, param in enumerate(self._params):
            param.register_post_accumulate_grad_hook(
                lambda _, index=index: self._on_gradient(index)
            )
        model.register_forward_pre_hook(lambda *_: self._mark("forward_start"))
        model.register_forward_hook(lambda *_: self._mark("forward_end"))
        if self.planner.profile_steps:
            self._use_plan((1,) * len(self._params), planned=False)  # profiled per tensor
            self._profile = BackwardProfile(backward=[0.0] * len(self._params))
        else:
            self._use_plan(*self.planner.plan(self._measurements()), planned=True)

    def _sizes(self) -> list[int]:
        return [p.numel() for p in self._params]

    def _measurements(self, **timings: Any) -> Measurements:
        first = self._params[0]
        return Measurements(
            sizes=self._sizes(),
            element_size=first.element_size(),
            density=self.compressor.density,
            device=first.device,
            **timings,
        )

    def _use_plan(
        self, plan: Plan, metrics: Mapping[str, float] | None = None, *, planned: bool
    ) -> None:
        """Switch to ``plan``, carrying every residual over to the new groups."""
        check_plan(plan, len(self._params))
        if self._plan and plan != self._plan:
            self._regroup_residuals(plan)
        self._plan, self._planned = plan, planned
        self._plan_metrics = {"sched/groups": float(len(plan)), **(metrics or {})}
        self._groups = groups_of(plan)
        self._group_of = [g for g, group in enumerate(self._groups) for _ in group]
        self._reset_step()

    def _regroup_residuals(self, plan: Plan) -> None:
        state = self.feedback.state_dict()
        if not state:
            return
        sizes = self._sizes()
        per_tensor: dict[int, Tensor] = {}
        for g, group in enumerate(self._groups):  # still the old plan's
            order = _model_order(group)
            numel = sum(sizes[i] for i in order)
            residual = state.get(_name(g), torch.zeros(numel)).reshape(-1)
            per_tensor.update(zip(order, residual.split([sizes[i] for i in order]), strict=True))
        self.feedback.load_state_dict(
            {
                _name(g): torch.cat([per_tensor[i] for i in _model_order(group)])
                for g, group in enumerate(groups_of(plan))
            }
        )

    # ---- one step -----------------------------------------------------------------------------
    def _reset_step(self) -> None:
        self._waiting = [len(group) for group in self._groups]
        self._launched: dict[int, tuple[Any, Tensor]] = {}
        self._compress_seconds = 0.0
        self._in_backward_seconds = 0.0
        self._marks: dict[str, float] = {}
        self._ready_at = [0.0] * len(self._params)
        self._last_mark: float | None = None

    def begin(self, *, step: int, epoch: int = 0) -> None:
        self._step, self._epoch = step, epoch

    def _mark(self, what: str) -> None:
        self._marks[what] = self.clock()
        if what == "forward_end":
            self._last_mark = self._marks[what]

    def _on_gradient(self, index: int) -> None:
        now = self.clock()
        # Backward time of this tensor: since the previous hook finished its own work.
        self._ready_at[index] = now - (self._last_mark if self._last_mark is not None else now)
        group = self._group_of[index]
        self._waiting[group] -= 1
        if self._waiting[group] == 0:
            self._launch(group, in_backward=True)
        self._last_mark = self.clock()

    def _launch(self, group: int, *, in_backward: bool) -> None:
        assert self._link is not None, "attach() before training"
        start = self.clock()
        members = _model_order(self._groups[group])
        flat = torch.cat([gradient_of(self._params[i]) for i in members])
        name = _name(group)
        payload, ctx = self.compress_with_feedback(
            flat,
            name=name,
            step=self._step,
            epoch=self._epoch,
            sizes=[self._params[i].numel() for i in members],
            tensors_after=min(members),  # backward index = tensors after it in the model
        )
        self._link.submit(group, payload, allreducible=self.compressor.allreducible)
        self._launched[group] = (ctx, flat)
        seconds = self.clock() - start
        self._compress_seconds += seconds
        if self._profile is not None:
            self._profile.selections.append((flat.numel(), seconds))
        if in_backward:
            self._in_backward_seconds += seconds

    def step(self, *, step: int, epoch: int = 0, loss: Tensor | None = None) -> SyncStats:
        assert self._optimizer is not None and self._link is not None, "attach() before step()"
        self._step, self._epoch = step, epoch
        # A group whose hooks did not all fire (a parameter without a gradient this step).
        for group in range(len(self._groups)):
            if group not in self._launched:
                self._launch(group, in_backward=False)
        waited = self.clock()
        received = self._link.wait()
        communicated = self.clock()
        agreeing = self.collective.busy_seconds()  # compressors talking while they select

        n = self.collective.world_size
        numel = selected_count = 0
        for group, members in enumerate(self._groups):
            ctx, flat = self._launched[group]
            summed, selected = combine(self.compressor, received[group], ctx, like=flat)
            summed.div_(n)
            offset = 0
            for i in _model_order(members):
                param = self._params[i]
                param.grad = summed[offset : offset + param.numel()].view_as(param)
                offset += param.numel()
            numel += flat.numel()
            selected_count += flat.numel() if selected is None else selected.numel()
        self._optimizer.step()
        updated = self.clock()

        count, link_count = self.collective.take_bytes(), self._link.collective.take_bytes()
        stats = SyncStats(
            bytes_sent=count.payload + link_count.payload,
            bytes_wire=count.wire + link_count.wire,
            bytes_dense=numel * self._params[0].element_size(),
            density_setup=self.compressor.density,
            density_actual=selected_count / numel,
            error_norm=self.feedback.norm(),
            time_compress=self._compress_seconds - agreeing,
            time_comm=communicated - waited + agreeing,
            time_update=updated - communicated,
            time_in_backward=self._in_backward_seconds,
            extra=dict(self._plan_metrics),
        )
        self._after_step(step)
        return stats

    def _after_step(self, step: int) -> None:
        profile = self._profile
        if not self._planned and profile is not None:
            forward = self._marks.get("forward_end", 0.0) - self._marks.get("forward_start", 0.0)
            if step > 0 or profile.steps:  # the first step pays for warm-up: leave it out
                profile.add(self._ready_at, max(forward, 0.0))
            if profile.steps >= self.planner.profile_steps:
                self._plan_from_profile(profile)
        self._reset_step()

    def _plan_from_profile(self, profile: BackwardProfile) -> None:
        assert self._link is not None
        device = self._params[0].device
        backward, forward = profile.agreed(self.collective, device)
        job = self._measurements(
            backward=backward,
            forward=forward,
            link=self._link.collective,
            selections=profile.selections,
            exchanges=self._link.take_timings(),
        )
        plan, metrics = self.planner.plan(job)
        self._use_plan(plan, metrics, planned=True)
        self._profile = None
        log.info(f"groups planned from {profile.steps} profiled steps: {len(plan)} groups")

    # ---- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "feedback": self.feedback.state_dict(),
            "plan": list(self._plan),
            "planned": self._planned,
            "plan_metrics": dict(self._plan_metrics),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # A resumed job keeps the groups it had (no new profiling), and their residuals.
        metrics = {k: v for k, v in state["plan_metrics"].items() if k != "sched/groups"}
        self._plan = ()
        self._use_plan(tuple(state["plan"]), metrics, planned=state["planned"])
        self.feedback.load_state_dict(state["feedback"])
        if self._planned:
            self._profile = None


def _model_order(group: range) -> list[int]:
    """A group's tensors in model order (indices count in backward order): compressors see a
    group's tensors as the model lists them, the output layer's last."""
    return list(reversed(group))


def _name(group: int) -> str:
    return f"group{group}"
