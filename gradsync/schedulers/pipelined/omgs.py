"""``scheduler=omgs``: OMGS-SGD. The job's per-tensor backward times are measured over its first
``profile_steps`` steps (every tensor its own group meanwhile), the top-k, per-group engine and
all-gather cost models are fitted on this machine and process group (what a group costs in this
engine, not only its top-k), and ``rule`` picks which tensors to merge:
``paper`` (Q3 ∧ Q5), ``code`` (the official code's test), ``safe`` (a merge only when the
modelled iteration gets shorter) or ``optimal`` (exact for the model). See ``merge_plans.py``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from typing_extensions import Unpack

from gradsync.algorithms.costs import CostModel, fit_alpha_beta, fit_gamma_delta
from gradsync.algorithms.merge_plans import (
    OMGS_RULES,
    Layers,
    Plan,
    iteration_seconds,
    no_merge,
    single_group,
    threshold_groups,
)
from gradsync.schedulers.engine.engine import EngineParts
from gradsync.schedulers.engine.profiling import measure_exchange, measure_gamma
from gradsync.schedulers.pipelined.config import MGS_THRESHOLD, OMGS_PROFILE_STEPS, OMGS_RULE
from gradsync.schedulers.pipelined.pipelined import Measurements, PipelinedSync

log = logging.getLogger("gradsync")
SPARSE_ELEMENT_BYTES = 8  # a float32 value and an int32 index


def _mgs(layers: Layers, cost: CostModel) -> Plan:
    return threshold_groups(layers.sizes, MGS_THRESHOLD)


def compare_rules(layers: Layers, cost: CostModel, forward: float) -> dict[str, tuple[Plan, float]]:
    """Every rule's plan and modelled iteration time, with no merging and one group beside them."""
    planners = {
        **OMGS_RULES,
        "no-merge (LAGS)": no_merge,
        "one group (TopK-SGD)": single_group,
        "threshold 8192 (MGS)": _mgs,
    }
    plans = {name: planner(layers, cost) for name, planner in planners.items()}
    return {
        name: (plan, iteration_seconds(plan, layers, cost, forward)) for name, plan in plans.items()
    }


def _write_back_per_group(job: Measurements) -> float:
    """Seconds of averaging and writing back one group, over the profiled steps (0 without)."""
    groups = sum(g for g, _ in job.write_backs)
    return sum(t for _, t in job.write_backs) / groups if groups else 0.0


class OmgsPlanner:
    def __init__(self, rule: str, profile_steps: int, costs: str | None) -> None:
        self.rule = rule
        self.profile_steps = profile_steps
        self.costs = costs

    def cost_model(self, job: Measurements) -> CostModel:
        """γ, δ, α, β from ``costs`` if given (δ: 0 when the file has none); else fitted to the
        compressions, write-backs and all-gathers of the profiled steps themselves (the job's
        real load and contention, and this engine's own work per group); else, when those
        cannot be fitted (all-reduced payloads are not timed one by one), microbenchmarks."""
        if self.costs is not None:  # fitted elsewhere (gradsync plan, another cluster)
            fitted = json.loads(Path(self.costs).read_text())
            gamma, alpha, beta = fitted["gamma"], fitted["alpha"], fitted["beta"]
            delta = fitted.get("delta", 0.0)
        else:
            assert job.link is not None
            gamma, delta, alpha, beta = self._fitted_in_place(job)
        dense = job.density >= 1.0
        return CostModel(
            gamma=gamma,
            alpha=alpha,
            beta=beta,
            density=job.density,
            bytes_per_element=job.element_size if dense else SPARSE_ELEMENT_BYTES,
            delta=delta,
        )

    def _fitted_in_place(self, job: Measurements) -> tuple[float, float, float, float]:
        assert job.link is not None
        try:
            sizes, selecting = [d for d, _ in job.selections], [t for _, t in job.selections]
            sent, exchanging = [b for b, _ in job.exchanges], [t for _, t in job.exchanges]
            gamma, delta = fit_gamma_delta(sizes, selecting, job.density)
            local = [gamma, delta + _write_back_per_group(job), *fit_alpha_beta(sent, exchanging)]
            if local[3] <= 0.0:
                # Bytes for free: every profiled exchange passed within a token-bucket
                # shaper's burst, or noise hid the bytes. Planned on, it drives merging by
                # start-ups alone; the microbenchmarks send sizes past any burst.
                raise ValueError("the exchanges' fit has no cost per byte")
            failed = 0.0
        except ValueError:  # too few, too uniform, or byte-blind samples on this worker
            local, failed = [0.0, _write_back_per_group(job), 0.0, 0.0], 1.0
        # Every worker plans with the same, most pessimistic, fit; all fall back together.
        gamma, delta, alpha, beta, any_failed = job.link.reduce_metrics(
            [*local, failed], device=job.device, op="max"
        )
        if not any_failed:
            return gamma, delta, alpha, beta
        gamma = measure_gamma(job.density, job.link, job.device, clock=job.clock)
        return (gamma, delta, *measure_exchange(job.link, job.device, clock=job.clock))

    def plan(self, job: Measurements) -> tuple[Plan, dict[str, float]]:
        cost = self.cost_model(job)
        layers = job.layer_times()
        compared = compare_rules(layers, cost, job.forward)
        for name, (plan, seconds) in compared.items():
            log.info(f"omgs: {name}: {len(plan)} groups, modelled iteration {seconds * 1e3:.2f} ms")
        plan, seconds = compared[self.rule]
        return plan, {
            "sched/model_iter_s": seconds,
            "sched/gamma": cost.gamma,
            "sched/delta": cost.delta,
            "sched/alpha": cost.alpha,
            "sched/beta": cost.beta,
        }


class OmgsSync(PipelinedSync):
    def __init__(
        self,
        *,
        rule: str = OMGS_RULE,
        profile_steps: int = OMGS_PROFILE_STEPS,
        costs: str | None = None,
        **parts: Unpack[EngineParts],
    ) -> None:
        if rule not in OMGS_RULES:
            raise ValueError(f"unknown scheduler.rule {rule!r}; valid: {', '.join(OMGS_RULES)}")
        super().__init__(planner=OmgsPlanner(rule, profile_steps, costs), **parts)
