"""``gradsync plan OVERRIDES...``: which tensors each OMGS rule merges, and the modelled iteration
time of every rule beside no merging (LAGS) and one group (TopK-SGD), without training.

The model is built from the composed config and profiled in this process: per-tensor backward
times and the forward time at ``trainer.batch_size``, and γ from torch.topk on this machine.
The exchange model (α, β) comes from ``scheduler.costs`` (a JSON file with gamma, alpha and beta,
as a run logs them) or else from the link: ``runner.bandwidth`` under ``runner=netem``, 1 Gbit/s
otherwise, as an all-gather ring over ``trainer.workers``.
"""

from __future__ import annotations

import json
from pathlib import Path
from time import perf_counter

from omegaconf import DictConfig, OmegaConf

from gradsync.algorithms.costs import CostModel
from gradsync.algorithms.merge_plans import Layers, groups_of
from gradsync.cli.command import CommandParser, docstring_help, print_or_fail
from gradsync.cluster.rates import DEFAULT_RATE, rate_mbit
from gradsync.jobs.compose import ConfigError, compose_jobs
from gradsync.measure.profile import training_step
from gradsync.projection.cluster import Cluster

USAGE = "usage: gradsync plan [scheduler=omgs] [model=...] [key=value ...]"


def link_costs(rate_mbit: float, workers: int) -> tuple[float, float]:
    """(α, β) of a ring all-gather: every worker's payload crosses n−1 links (at least one,
    so a plan for one worker still weighs its groups)."""

    cluster = Cluster(workers=max(workers, 2), bandwidth_bps=rate_mbit * 1e6)
    alpha = cluster.all_gather(0.0)
    return alpha, cluster.all_gather(1.0) - alpha


def _exchange_costs(cfg: DictConfig) -> tuple[float | None, float, float, float, str]:
    """(γ or None to measure it here, δ, α, β, where they come from)."""
    costs = cfg.scheduler.get("costs")
    if costs:
        fitted = json.loads(Path(costs).read_text(encoding="utf-8"))
        gamma, alpha, beta = fitted["gamma"], fitted["alpha"], fitted["beta"]
        return gamma, fitted.get("delta", 0.0), alpha, beta, f"fitted values from {costs}"

    bandwidth = str(cfg.runner.get("bandwidth") or DEFAULT_RATE)
    alpha, beta = link_costs(rate_mbit(bandwidth), int(cfg.trainer.workers))
    return (
        None,
        0.0,
        alpha,
        beta,
        f"a {bandwidth} link, all-gather ring over {cfg.trainer.workers} workers",
    )


def plan(cfg: DictConfig) -> str:
    # Deferred for start-up: torch, and what imports it, only for `gradsync plan`.
    import torch

    from gradsync.comm.solo import SoloCollective
    from gradsync.schedulers.engine.profiling import measure_gamma, profile_model
    from gradsync.schedulers.pipelined.omgs import SPARSE_ELEMENT_BYTES, compare_rules

    model, loss, _ = training_step(cfg)  # one batch as the training loader collates it
    backward, forward = profile_model(model, loss)
    density = float(cfg.compressor.get("density", 1.0))
    gamma, delta, alpha, beta, source = _exchange_costs(cfg)
    if gamma is None:
        gamma = measure_gamma(density, SoloCollective(), torch.device("cpu"), clock=perf_counter)
    cost = CostModel(
        gamma=gamma,
        alpha=alpha,
        beta=beta,
        density=density,
        bytes_per_element=SPARSE_ELEMENT_BYTES,
        delta=delta,
    )
    params = [name for name, p in model.named_parameters() if p.requires_grad][::-1]
    layers = Layers(
        backward=tuple(backward),
        sizes=tuple(p.numel() for p in model.parameters() if p.requires_grad)[::-1],
    )
    compared = compare_rules(layers, cost, forward)
    chosen = str(cfg.scheduler.get("rule", "optimal"))
    lines = [
        f"{len(layers)} tensors, {sum(layers.sizes):,} elements; density {density:g}; "
        f"batch {cfg.trainer.batch_size}: forward {forward * 1e3:.2f} ms, "
        f"backward {sum(backward) * 1e3:.2f} ms",
        f"cost model: gamma={gamma:.3g} s (torch.topk here), delta={delta:.3g} s a group, "
        f"alpha={alpha:.3g} s, beta={beta:.3g} s/byte ({source})",
        "",
        f"{'plan':<22} {'groups':>6} {'iteration (ms)':>15} {'vs one group':>13}",
    ]
    single = compared["one group (TopK-SGD)"][1]
    for name, (plan_, seconds) in compared.items():
        lines.append(
            f"{name:<22} {len(plan_):>6} {seconds * 1e3:>15.2f} {single / seconds:>12.2f}x"
        )
    lines += ["", f"groups of rule={chosen} (backward order, output layer first):"]
    for g, members in enumerate(groups_of(compared[chosen][0])):
        size = sum(layers.sizes[i] for i in members)
        first, last = params[members[0]], params[members[-1]]
        span = first if len(members) == 1 else f"{first} .. {last}"
        lines.append(f"  {g:>3}: {len(members):>3} tensors, {size:>10,} elements  {span}")
    return "\n".join(lines)


def _parser() -> CommandParser:
    parser = CommandParser("plan", help_text=docstring_help(USAGE, __doc__))
    parser.add_argument("overrides", nargs="*")
    return parser


def _plan(args: list[str]) -> str | None:
    parsed = _parser().parse(args)
    if parsed is None:
        return None  # the help was asked for
    (cfg,) = compose_jobs(parsed.overrides, multirun=False, launcher_here=False)
    if OmegaConf.select(cfg, "scheduler.rule") is None:
        raise ConfigError(
            "gradsync plan compares the merge rules of scheduler=omgs; add scheduler=omgs"
        )
    return plan(cfg)


def main(args: list[str]) -> int:
    return print_or_fail(lambda: _plan(args))
