"""``gradsync simulate OVERRIDES... [--timeline FILE.png]``: the iteration time, throughput,
bubble ratio and update frequency that WFBP (DDP), ByteScheduler, US-Byte and DeFT (one and two
links) would reach on the composed job, from the discrete-event simulator, without training.

The model is built from the composed config and profiled in this process at
``trainer.batch_size``: per-tensor forward (module hooks) and backward (gradient hooks) times,
spread over buckets of ``scheduler.partition_size`` elements (6,500,000 when the scheduler has
none). A bucket's communication is a ring all-reduce over ``trainer.workers`` at
``runner.bandwidth`` (1gbit when the runner has none); the second link runs at
``runner.second_bandwidth``, else at the first one's rate divided by ``scheduler.mu`` (1.65
when unset). For DeFT, buckets too long for the forward window are split first, as it does.
``--timeline FILE.png`` draws one steady iteration of every schedule: compute and the links.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from gradsync.config.compose import ConfigError, compose_jobs
from gradsync.job_command import print_or_fail, wants_help

if TYPE_CHECKING:  # torch is imported only once a simulation runs
    from gradsync.sync.buckets import Buckets
    from gradsync.sync.simulator import Prediction

USAGE = "usage: gradsync simulate [model=...] [key=value ...] [--timeline FILE.png]"
HOP_LATENCY_S = 5e-5  # one message's start-up on a local network (as gradsync plan assumes)
DEFAULT_BANDWIDTH = "1gbit"
MAX_DEFT_BUCKETS = 256  # splitting further only slows the knapsacks down
ITERATIONS = 30
MU = 1.65  # the paper's slow-link factor, when neither the runner nor the scheduler gives one
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def ring_allreduce(rate_mbit: float, workers: int) -> tuple[float, float]:
    """(α seconds, β seconds per byte) of a ring all-reduce: 2(n−1) steps, each moving 1/n of
    the payload over one link."""
    steps = 2 * (workers - 1)
    return steps * HOP_LATENCY_S, steps / workers * 8 / (rate_mbit * 1e6)


def _rates(cfg: DictConfig) -> tuple[str, float, str, float]:
    """(first link's rate as written, in Mbit/s, second's, in Mbit/s)."""
    from runners.testbed import rate_mbit

    first = str(cfg.runner.get("bandwidth") or DEFAULT_BANDWIDTH)
    second = cfg.runner.get("second_bandwidth")
    try:
        fast = rate_mbit(first)
        if second:
            return first, fast, str(second), rate_mbit(str(second), name="second_bandwidth")
    except ValueError as exc:
        raise ConfigError(f"runner.{exc}") from None
    mu = float(cfg.scheduler.get("mu") or MU)
    return first, fast, f"{fast / mu:.4g}mbit (link 1 / {mu:g})", fast / mu


def _split_for_windows(
    buckets: Buckets, comm: Sequence[float], limit: float, alpha: float
) -> Buckets:
    """DeFT's step (3) of partitioning: buckets whose communication exceeds ``limit`` split
    until each fits (the start-up α is paid by every piece, so only the rest is divided)."""
    if limit <= alpha:  # no piece could fit: splitting would only add start-ups
        return buckets
    room = max(limit - alpha, sum(comm) / MAX_DEFT_BUCKETS)
    return buckets.refine([c - alpha for c in comm], room)


def simulate(cfg: DictConfig, timeline: Path | None = None) -> str:
    import torch
    from torch.utils.data import default_collate

    from gradsync.sync.buckets import PARTITION_SIZE, Buckets
    from gradsync.sync.profiling import profile_tensors
    from gradsync.sync.simulator import (
        BucketTimes,
        bytescheduler,
        coverage_rate,
        deft,
        usbyte,
        wfbp,
    )
    from gradsync.tasks import build_task
    from gradsync.train.build import build_data, build_model

    first, fast, second, slow = _rates(cfg)
    workers = int(cfg.trainer.workers)
    batch_size = int(cfg.trainer.batch_size)
    partition_size = int(cfg.scheduler.get("partition_size") or PARTITION_SIZE)
    torch.set_num_threads(int(cfg.trainer.threads_per_worker))
    torch.manual_seed(int(cfg.trainer.seed))
    data = build_data(cfg)
    model = build_model(cfg, data.spec)
    task = build_task(data.spec)
    batch = tuple(default_collate([data.train[i] for i in range(batch_size)]))
    forward, backward = profile_tensors(model, lambda: task.loss(model, batch))
    params = [p for p in model.parameters() if p.requires_grad][::-1]
    sizes = [p.numel() for p in params]
    element_bytes = params[0].element_size() if params else 4
    alpha, beta = ring_allreduce(fast, workers)

    def times_of(buckets: Buckets) -> BucketTimes:
        comm = [
            alpha + beta * element_bytes * buckets.numel(b) if workers > 1 else 0.0
            for b in range(len(buckets))
        ]
        return BucketTimes(
            forward=tuple(buckets.spread(forward, sizes)),
            backward=tuple(buckets.spread(backward, sizes)),
            comm=tuple(comm),
        )

    buckets = Buckets.partition(sizes, partition_size)
    times = times_of(buckets)
    mu = fast / slow
    # The smallest knapsack is the forward window, on the slow link when there are two.
    window = sum(times.forward) / max(mu, 1.0)
    deft_buckets = _split_for_windows(buckets, times.comm, window, alpha)
    deft_times = times_of(deft_buckets)
    predictions = {
        "wfbp": wfbp(times, ITERATIONS),
        "bytescheduler": bytescheduler(times, iterations=ITERATIONS, alpha=alpha),
        "usbyte": usbyte(times, ITERATIONS, alpha=alpha),
        "deft": deft(deft_times, ITERATIONS),
        "deft-2links": deft(deft_times, ITERATIONS, mu=mu),
    }
    if timeline is not None:
        draw_timelines(predictions, timeline)
    baseline = predictions["wfbp"].iteration
    lines = [
        f"model {type(model).__name__}: {len(sizes)} tensors, {sum(sizes):,} elements; "
        f"batch {batch_size}: forward {sum(forward) * 1e3:.2f} ms, "
        f"backward {sum(backward) * 1e3:.2f} ms (profiled here)",
        f"buckets: {len(buckets)} of up to {partition_size:,} elements; deft: "
        f"{len(deft_buckets)} after splitting to fit the forward window",
        f"workers: {workers}, ring all-reduce: alpha={alpha:.3g} s, beta={beta:.3g} s/byte",
        f"bandwidth: link 1 {first}, link 2 {second}: a bucket takes mu={mu:.3g} times as long",
        f"coverage rate T_comm/(T_fwd+T_bwd): {coverage_rate(times):.3g}",
        "",
        f"{'schedule':<14} {'iteration (ms)':>14} {'samples/s':>11} {'bubble':>7} "
        f"{'updates/iter':>12} {'vs wfbp':>8}",
    ]
    for name, p in predictions.items():
        samples = batch_size * workers / p.iteration if p.iteration > 0 else math.inf
        speedup = baseline / p.iteration if p.iteration > 0 else math.inf
        lines.append(
            f"{name:<14} {p.iteration * 1e3:>14.3f} {samples:>11,.0f} {p.bubble_ratio:>7.1%} "
            f"{p.update_frequency:>12.2f} {speedup:>7.2f}x"
        )
    if timeline is not None:
        lines += ["", f"timeline: {timeline}"]
    return "\n".join(lines)


_COLORS = {"F": "#4c72b0", "B": "#dd8452", "link 1": "#55a868", "link 2": "#8172b3"}


def draw_timelines(predictions: Mapping[str, Prediction], path: Path) -> None:
    """One lane chart per schedule: compute, link 1 and link 2 through one steady iteration;
    sends of an earlier iteration's gradient are hatched."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    from gradsync.sync.simulator import COMPUTE, LINK_1, LINK_2

    lanes = {COMPUTE: 2, LINK_1: 1, LINK_2: 0}
    figure = Figure(figsize=(11, 1.6 * len(predictions) + 1.0), layout="constrained")
    axes = figure.subplots(len(predictions), 1, sharex=True, squeeze=False)[:, 0]
    span = max((p.timeline_span for p in predictions.values()), default=0.0)
    for ax, (name, prediction) in zip(axes, predictions.items(), strict=True):
        for event in prediction.timeline:
            color = _COLORS[event.label[0]] if event.stream == COMPUTE else _COLORS[event.stream]
            width = (event.end - event.start) * 1e3
            ax.broken_barh(
                [(event.start * 1e3, width)],
                (lanes[event.stream] - 0.4, 0.8),
                facecolors=color,
                edgecolor="white",
                linewidth=0.5,
                hatch="//" if " t-" in event.label else None,
            )
            if width > 0.04 * span * 1e3:  # room for the label
                ax.text(
                    (event.start + event.end) / 2 * 1e3,
                    lanes[event.stream],
                    event.label,
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white",
                    clip_on=True,
                )
        ax.set_yticks([0, 1, 2], [LINK_2, LINK_1, COMPUTE])
        ax.set_ylim(-0.6, 2.6)
        ax.set_title(
            f"{name}: iteration {prediction.iteration * 1e3:.2f} ms, bubble "
            f"{prediction.bubble_ratio:.0%}, {prediction.update_frequency:.2f} updates/iteration",
            loc="left",
            fontsize=9,
        )
    axes[-1].set_xlim(0, span * 1e3 if span > 0 else 1)
    axes[-1].set_xlabel("ms from the start of one steady-state iteration")
    figure.legend(
        handles=[
            Patch(color=_COLORS["F"], label="forward"),
            Patch(color=_COLORS["B"], label="backward"),
            Patch(color=_COLORS["link 1"], label="send on link 1"),
            Patch(color=_COLORS["link 2"], label="send on link 2"),
            Patch(facecolor="white", edgecolor="black", hatch="//", label="earlier gradient"),
        ],
        loc="outside lower center",
        ncols=5,
        fontsize=8,
    )
    figure.savefig(path, dpi=120)


def _parse(args: list[str]) -> tuple[list[str], Path | None]:
    """(overrides, timeline path); ConfigError on a bad option."""
    overrides, timeline, rest = [], None, list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--timeline" or arg.startswith("--timeline="):
            value = arg.partition("=")[2] if "=" in arg else (rest.pop(0) if rest else "")
            if not value:
                raise ConfigError("--timeline needs a file name, e.g. --timeline timeline.png")
            timeline = Path(value)
            if timeline.suffix.lower() not in FIGURE_SUFFIXES:
                raise ConfigError(
                    f"--timeline {value}: the file must end in {', '.join(FIGURE_SUFFIXES)}"
                )
            if not timeline.parent.is_dir():
                raise ConfigError(f"--timeline {value}: no directory {timeline.parent}")
        elif arg.startswith("-"):
            raise ConfigError(f"unknown option {arg}; see gradsync simulate --help")
        else:
            overrides.append(arg)
    return overrides, timeline


def _simulate(args: list[str]) -> str:
    overrides, timeline = _parse(args)
    (cfg,) = compose_jobs(overrides, multirun=False, launcher_here=False)
    if OmegaConf.select(cfg, "trainer.workers") is None:
        raise ConfigError("trainer.workers is not set")
    return simulate(cfg, timeline)


def main(args: list[str]) -> int:
    if wants_help(args, USAGE, __doc__):
        return 0
    return print_or_fail(lambda: _simulate(args))
