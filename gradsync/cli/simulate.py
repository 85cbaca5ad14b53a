"""``gradsync simulate OVERRIDES... [options]``: the iteration time and throughput that every
compressor × scheduler would reach on the composed job, and projected to other clusters,
without training.

The model is built from the composed config and profiled on this machine at
``trainer.batch_size`` (per-tensor forward and backward times, the optimizer's update), and every
compressor runs once on its real gradient to record what it sends (``gradsync/projection/``).
For the bundled jobs of ``gradsync/measure/kept.py`` (resnet50 and resnet18 on dataset=synthetic)
these measurements are kept in the package and nothing is profiled (``--remeasure`` profiles
here); whatever is measured is said on a progress bar on stderr.
The job's own cluster is ``trainer.workers`` at ``runner.bandwidth`` (1gbit when the runner has
none); under runner=local or runner=netem every process shares this host, so compute is
slowed by the workers' share of its cores. Communication is priced with α-β models of the
collectives (``--algorithm``, ``--latency``, ``--gpus-per-node``/``--intra-bandwidth``: the
TernGrad paper's appendix B), schedules by the discrete-event simulator and OMGS's timeline.
The compressor and scheduler options among the overrides (``compressor.density=0.001``) go to
every compressor and scheduler that has them.

A cluster you do not have is described by ``--cluster FILE.yaml`` (its keys are in the
configuration reference), or by the name of one shipped with gradsync, and the options after
it, which set the same keys: the job's rows are then that cluster's, its compute the file's
(published or measured GPU throughput), and only the shares of the compute among the tensors
and the wire formats are this host's.

options:
  --compressors A,B        compressors to combine (default: all)
  --schedulers X,Y         schedulers to combine (default: all)
  --workers 16,64,256,512  project to clusters of these sizes (one worker per machine, each
                           with its own cores: profiled in one process)
  --bandwidths 1gbit,10gbit,100gbit   ... at these link rates (default: the job's rate)
  --latency SECONDS        per-message start-up (default 5e-05)
  --algorithm ring|tree    all-reduce/all-gather algorithm between machines (default ring)
  --gpus-per-node G        workers per machine, talking at --intra-bandwidth inside it
  --intra-bandwidth RATE   e.g. 100gbit (needed with --gpus-per-node above 1)
  --cluster FILE.yaml|NAME describe the cluster: workers, links, measured collectives, the
                           machines' compute and selection costs; NAME: a shipped one (below)
  --compute SECONDS        one worker's forward + backward + update per iteration there
  --throughput SAMPLES/S   ... or its published training throughput
  --selection C=S          compressor C compresses d elements in S·d·log2 d seconds there
                           (C=S/element: S·d); repeatable
  --collective OP=A,B[@N]  OP (all_reduce, all_gather, broadcast, point_to_point) costs
                           A + B·size seconds there (size: nccl-tests' bytes), at N workers or
                           any; repeatable
  --plot FILE.png          draw the projection: speed-up over dense WFBP (DDP) against workers
  --timeline FILE.png      draw one steady iteration of each bucketed schedule of the job
  --warmup-steps N         train N steps before taking the gradient the compressors are
                           measured on (a threshold's density depends on the training stage)
  --compute-scale F        multiply every measured compute time (forward, backward, update,
                           loading, compression) by F: e.g. 0.02 for accelerators 50x faster
                           than this host
  --measurements FILE.json start from the profiles, wire formats and link probes saved in
                           FILE (when it exists), and save there what this run measured: a
                           later prediction then uses this host's speed of that moment
  --remeasure              measure everything here: neither the kept profiles nor FILE of
                           --measurements are read (FILE is written)
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from gradsync.algorithms.simulator import PAPER_MU
from gradsync.cli.command import CommandParser, checked, docstring_help, print_or_fail
from gradsync.cli.simulate_cluster import (
    add_cluster_options,
    compute_entry,
    describe,
    described,
    job_cluster,
    job_shape,
    machines,
    machines_line,
    tc_rate,
    unused_file_fits,
    unused_fit,
)
from gradsync.cluster.rates import bits_per_s
from gradsync.config.checks import Check
from gradsync.jobs.alternatives import (
    Alternative,
    applies,
    check_somebody_has,
    compose_alternatives,
    swept,
)
from gradsync.jobs.compose import ConfigError
from gradsync.jobs.discovery import group_options
from gradsync.projection.cluster_spec import (
    ClusterSpec,
    ModelComputeSpec,
    field_check,
    shipped_clusters,
)
from gradsync.projection.timelines import draw_timelines
from gradsync.schedulers.registry import SCHEDULERS, baseline_spec
from gradsync.train.capacity import FORCE, capacity_problem

if TYPE_CHECKING:  # torch is imported only once a simulation runs
    from gradsync.measure.jobs import Predictor
    from gradsync.projection.cluster import Cluster
    from gradsync.projection.cluster_spec import Described
    from gradsync.projection.estimates import Estimate

USAGE = (
    "usage: gradsync simulate [model=...] [key=value ...] [--workers N,...] "
    "[--bandwidths RATE,...] [--plot FILE.png] [--timeline FILE.png]"
)
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")
MAX_WARMUP_STEPS = 100_000
"""More steps than any threshold takes to settle: a larger count is a typo (it would train for
days before predicting)."""
MAX_COMPUTE_SCALE = 1000.0
"""Machines a thousand times slower than this host: a larger factor is a typo."""
DENSE = "none"  # the compressor of the baseline, dense DDP (its scheduler: the registry's)


@dataclass(frozen=True)
class Combination:
    compressor: str
    scheduler: str
    settings: tuple[str, ...]
    cfg: DictConfig

    @property
    def name(self) -> str:
        return " ".join((f"{self.compressor} × {self.scheduler}", *self.settings))

    @property
    def headline(self) -> bool:
        """One of the five papers' headline combinations (its scheduler's registry entry
        says): a line of the projection plot."""
        own = tuple(s for s in self.settings if s.startswith("scheduler."))  # not a sweep's
        return (self.compressor, *own) in SCHEDULERS[self.scheduler].headline


def _help() -> str:
    """The usage, the module's docstring and the clusters shipped with gradsync."""
    shipped = ", ".join(shipped_clusters())
    return f"{docstring_help(USAGE, __doc__)()}\n\nshipped clusters (--cluster NAME): {shipped}"


def _parser() -> CommandParser:
    parser = CommandParser("simulate", help_text=_help)
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--compressors", type=_names)
    parser.add_argument("--schedulers", type=_names)
    parser.add_argument("--workers", type=_counts)
    parser.add_argument("--bandwidths", type=_link_rates)
    add_cluster_options(parser)
    parser.add_argument("--plot", type=_figure_path)
    parser.add_argument("--timeline", type=_figure_path)
    parser.add_argument("--warmup-steps", type=_count, default=0)
    parser.add_argument("--compute-scale", type=_positive, default=1.0)
    parser.add_argument("--measurements", type=_json_path)
    parser.add_argument("--remeasure", action="store_true")
    return parser


def _names(text: str) -> list[str]:
    return [part for part in text.split(",") if part]


def _counts(text: str) -> list[int]:
    """Worker counts, each in a cluster description's range of ``workers`` (1e6 is read as the
    count it writes, so that a count too large is told its bound)."""
    try:
        counts = [_whole(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of worker counts") from None
    check = replace(field_check(ClusterSpec, "workers"), nullable=False)
    for problem in (check.failure("worker counts", n) for n in counts):
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
    return counts


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        number = float(text)  # ValueError: not a number at all
    if not number.is_integer():  # inf and nan are not either
        raise ValueError(text)
    return int(number)


def _link_rates(text: str) -> list[str]:
    """Link rates (``1gbit,10gbit``), each checked as a cluster description's ``bandwidth``."""
    rates = _names(text)
    check = field_check(ClusterSpec, "bandwidth")
    for problem in (check.failure("bandwidth", rate) for rate in rates):
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
    return rates


_count = checked(int, Check(at_least=0, at_most=MAX_WARMUP_STEPS), "warm-up steps")
_positive = checked(float, Check(above=0, at_most=MAX_COMPUTE_SCALE), "compute scale")


def _json_path(text: str) -> Path:
    path = Path(text)
    if path.suffix.lower() != ".json":
        raise argparse.ArgumentTypeError(f"{text}: the file must end in .json")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no directory {path.parent}")
    return path


def _figure_path(text: str) -> Path:
    path = Path(text)
    if path.suffix.lower() not in FIGURE_SUFFIXES:
        raise argparse.ArgumentTypeError(
            f"{text}: the file must end in {', '.join(FIGURE_SUFFIXES)}"
        )
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no directory {path.parent}")
    return path


def _chosen(asked: list[str] | None, group: str) -> list[str]:

    valid = group_options()[group]
    unknown = [name for name in asked or [] if name not in valid]
    if unknown:
        raise ConfigError(f"unknown {group} {', '.join(unknown)}; valid: {', '.join(valid)}")
    return asked or valid


def combinations(
    overrides: Sequence[str], compressors: Sequence[str], schedulers: Sequence[str]
) -> tuple[Combination, list[Combination], list[str]]:
    """The dense baseline; every pair (and scheduler variant, and value of a swept compressor
    or scheduler option) that composes; the reasons of the pairs that do not. The compressor
    and scheduler options ``overrides`` set go to those that have them
    (``jobs/alternatives.py``)."""
    fixed, axes = swept(overrides)
    swept_keys = {values[0].split("=", 1)[0] for values in axes}
    pairs = [
        Alternative(compressor, scheduler, settings)
        for scheduler in schedulers
        for settings in _variants(scheduler, fixed, swept_keys)
        for compressor in compressors
    ]
    check_somebody_has([values[0] for values in axes], pairs)
    each_value = dict.fromkeys(
        replace(pair, settings=(*pair.settings, *(s for s in values if applies(s, pair))))
        for pair in pairs
        for values in itertools.product(*axes)
    )
    wanted = [Alternative(DENSE, baseline_spec().name), *each_value]
    baseline, *composed = compose_alternatives(fixed, wanted)
    if baseline.problem is not None:
        raise ConfigError(f"the dense WFBP baseline does not compose: {baseline.problem}")
    usable, refused, told = [], [], set()
    for each in composed:
        pair = each.alternative
        combination = Combination(pair.compressor, pair.scheduler, pair.settings, each.cfg)
        if each.problem is None:
            usable.append(combination)
        elif (pair.compressor, pair.scheduler) not in told:  # once a pair
            told.add((pair.compressor, pair.scheduler))
            refused.append(f"{pair.compressor} × {pair.scheduler}: {each.problem}")
    dense = baseline.alternative
    return Combination(dense.compressor, dense.scheduler, (), baseline.cfg), usable, refused


def _variants(
    scheduler: str, overrides: Sequence[str], swept_keys: set[str]
) -> list[tuple[str, ...]]:
    """The option settings of ``scheduler`` that each get a row (its registry entry's
    ``simulate_variants``), where an option the command sets replaces the variants' own and
    one it sweeps takes their place."""
    given = {o.split("=", 1)[0]: o for o in overrides if o.startswith("scheduler.")}
    variants = [
        tuple(
            given.get(key, setting)
            for setting in settings
            if (key := setting.split("=", 1)[0]) not in swept_keys
        )
        for settings in SCHEDULERS[scheduler].simulate_variants
    ]
    return list(dict.fromkeys(variants))


def _estimate(predictor: Predictor, c: Combination, cluster: Cluster | None = None) -> Estimate:
    return predictor.estimate(
        c.cfg, scheduler=c.scheduler, compressor=c.compressor, cluster=cluster
    )


@dataclass(frozen=True)
class Composed:
    """The combinations of a command, composed once: the dense baseline, those that compose,
    why the others do not; and the ``models`` entry of the cluster file its compute is of."""

    baseline: Combination
    combos: list[Combination]
    refused: list[str]
    entry: ModelComputeSpec | None


def simulate(args: argparse.Namespace) -> str:
    description = described(args)  # a bad cluster file is said before torch is imported
    baseline, combos, refused = combinations(
        args.overrides,
        _chosen(args.compressors, "compressor"),
        _chosen(args.schedulers, "scheduler"),
    )
    options = group_options()
    shape = job_shape(baseline.cfg) if description is not None else None
    compute, selection = machines(
        description, options["compressor"], args.compute_scale, shape, options["model"]
    )
    entry = None if shape is None else compute_entry(description, shape, options["model"])
    # Deferred for start-up: it imports torch, which this module's importers may not need.
    from gradsync.measure.jobs import Predictor
    from gradsync.measure.kept import KeptProfiles
    from gradsync.measure.progress import Progress

    progress = Progress()
    predictor = Predictor(
        warmup_steps=args.warmup_steps,
        compute_scale=args.compute_scale,
        compute=compute,
        selection=selection,
        plans_here=description is None,
        # Kept profiles are of the gradient before any training.
        kept=None if args.remeasure or args.warmup_steps else KeptProfiles(),
        progress=progress,
    )
    if args.measurements is not None and args.measurements.exists() and not args.remeasure:
        try:
            predictor.load(args.measurements)
        except ValueError as exc:
            raise ConfigError(f"--measurements: {exc}") from None
    try:
        output = _simulated(
            args, predictor, description, Composed(baseline, combos, refused, entry)
        )
    finally:
        progress.close()
    if args.measurements is not None:
        predictor.save(args.measurements)
    return output


def _simulated(
    args: argparse.Namespace,
    predictor: Predictor,
    description: Described | None,
    composed: Composed,
) -> str:
    baseline, combos, refused = composed.baseline, composed.combos, composed.refused
    cfg = baseline.cfg
    cluster = job_cluster(args, cfg, description)
    _check_probe_fits_here(cfg, cluster)
    rates = _rates(args.bandwidths, cluster)
    targets = _targets(args, rates, cluster)  # before anything is measured: each must build
    counts = _fit_counts(cluster, targets.values())
    problem = unused_fit(args, counts)
    if problem is not None:
        raise ConfigError(problem)
    for warning in unused_file_fits(args, cluster, counts):
        print(f"gradsync: warning: {warning}", file=sys.stderr)
    if not combos:
        raise ConfigError(f"no compressor × scheduler composes: {refused[0]}")
    here = predictor.profiled(cfg).profile
    profile = predictor.machine_profile(cfg)[0]
    shown = here if predictor.compute is not None else profile  # the cluster's: next line
    scaled = f", times x{args.compute_scale:g}" if args.compute_scale != 1.0 else ""
    if cluster.compute_slowdown > 1.0:
        scaled += (
            f"; x{cluster.compute_slowdown:g} in the job, whose {cluster.workers} workers share "
            f"{cluster.shared_host_cores} cores"
        )
    lines = [
        f"model {here.model}: {len(here.sizes)} tensors, {here.numel:,} elements; batch "
        f"{here.batch_size}: forward {sum(shown.forward) * 1e3:.2f} ms, backward "
        f"{sum(shown.backward) * 1e3:.2f} ms, update {shown.update * 1e3:.2f} ms "
        f"({_profile_source(predictor, cfg)}{scaled})",
        *describe(cluster),
    ]
    machine = machines_line(profile, here, predictor.compute, predictor.selection, composed.entry)
    lines += [machine] if machine else []
    lines += [*_device_note(cfg, predictor), ""]
    batch, workers = profile.batch_size, cluster.workers
    reference = _estimate(predictor, baseline, cluster).iteration
    rows = sorted(
        ((c, _estimate(predictor, c, cluster)) for c in combos), key=lambda r: r[1].iteration
    )
    width = max(len(c.name) for c in combos)
    lines.append(
        f"{'compressor × scheduler':<{width}} {'iteration (ms)':>14} {'samples/s':>11} "
        f"{'updates/iter':>12} {'groups':>6} {'vs dense DDP':>12}"
    )
    for combo, estimate in rows:
        groups = "-" if estimate.groups is None else str(estimate.groups)
        lines.append(
            f"{combo.name:<{width}} {estimate.iteration * 1e3:>14.3f} "
            f"{estimate.samples_per_s(batch, workers):>11,.0f} "
            f"{estimate.updates_per_iteration:>12.2f} {groups:>6} "
            f"{reference / estimate.iteration:>11.2f}x"
        )
    if refused:
        lines += ["", f"not combinable ({len(refused)}): " + "; ".join(refused[:3])]
        lines += ["  ..."] if len(refused) > 3 else []
    if targets:
        lines += ["", *_projection(args, rates, targets, predictor, baseline, combos, cluster)]
    if args.timeline is not None:
        _draw_job_timelines(predictor, combos, cluster, args.timeline)
        lines += ["", f"timeline: {args.timeline}"]
    return "\n".join(lines)


def _profile_source(predictor: Predictor, cfg: DictConfig) -> str:
    """Where the profile's times come from: this host, or the host that measured the kept
    profile (``gradsync/measure/kept.py``)."""
    kept = predictor.kept_for(cfg)
    if kept is None:
        return "profiled here alone"
    return f"kept profile, {kept.describe()}, one thread; --remeasure profiles this host"


def _device_note(cfg: DictConfig, predictor: Predictor) -> list[str]:
    """What a profile taken on a GPU does not cover: compression and summing are timed on
    this host's CPU, for the compressors without a selection cost."""
    # Deferred for start-up: it imports torch, which this module's importers may not need.
    from gradsync.measure.profile import device_name

    device = device_name(cfg)
    if device == "cpu":
        return []
    return [
        f"note: compute is profiled on {device}; compression and summing are timed on this "
        f"host's CPU except where --selection gives {device}'s own"
    ]


def _check_probe_fits_here(cfg: DictConfig, cluster: Cluster) -> None:
    """The job's own cluster shares this host: its links are probed among that many local
    processes, which this host must hold."""

    if cluster.shared_host_cores is None:
        return
    problem = capacity_problem(cfg, cluster.workers)
    if problem is not None:
        n = cluster.workers
        raise ConfigError(
            f"trainer.workers={n} would probe links among {n} processes on this host: "
            f"{problem}; to project to {n} workers keep trainer.workers small and pass "
            f"--workers {n} (or force the probe with {FORCE})"
        )


def _rates(asked: list[str] | None, cluster: Cluster) -> list[tuple[str, float]]:
    """(as written, bits/s) of every ``--bandwidths`` rate; the job's own when none."""
    try:
        rates = [(rate, bits_per_s(rate, name="--bandwidths")) for rate in asked or []]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return rates or [(tc_rate(cluster.bandwidth_bps), cluster.bandwidth_bps)]


def _targets(
    args: argparse.Namespace, rates: list[tuple[str, float]], cluster: Cluster
) -> dict[tuple[str, int], Cluster]:
    """The clusters of dedicated machines ``--workers`` and ``--bandwidths`` project to, by
    (rate as written, workers); none when neither is given."""
    if not (args.workers or args.bandwidths):
        return {}
    dedicated = replace(cluster, shared_host_cores=None, second_bandwidth_bps=None)
    targets = {}
    for (rate, bps), n in itertools.product(rates, args.workers or [cluster.workers]):
        try:
            targets[(rate, n)] = replace(
                dedicated,
                workers=n,
                bandwidth_bps=bps,
                second_bandwidth_bps=bps / PAPER_MU,
                # Measured collectives hold on the links they were measured on only.
                fitted=cluster.fitted if bps == cluster.bandwidth_bps else {},
            )
        except ValueError as exc:
            raise ConfigError(f"--workers {n}: {exc}") from None
    return targets


def _fit_counts(cluster: Cluster, targets: Iterable[Cluster]) -> set[int]:
    """The worker counts that a measured fit of ``cluster`` can price: the job's rows' and
    those of the projection's columns at the cluster's own links."""
    return {cluster.workers} | {target.workers for target in targets if target.fitted}


def _projection(
    args: argparse.Namespace,
    rates: list[tuple[str, float]],
    targets: dict[tuple[str, int], Cluster],
    predictor: Predictor,
    baseline: Combination,
    combos: Sequence[Combination],
    cluster: Cluster,
) -> list[str]:
    """Speed-up over dense DDP of every combination, on clusters of dedicated machines."""
    sizes = args.workers or [cluster.workers]
    speedups: dict[str, dict[tuple[str, int], float]] = {c.name: {} for c in combos}
    for key, target in targets.items():
        dense = _estimate(predictor, baseline, target).iteration
        for combo in combos:
            speedups[combo.name][key] = dense / _estimate(predictor, combo, target).iteration
    columns = [f"{n}@{rate}" for rate, n in itertools.product([r for r, _ in rates], sizes)]
    width = max(len(name) for name in speedups)
    lines = [
        "projected speed-up over dense WFBP (DDP), one worker per machine "
        f"(deft links=2: a second link at rate/{PAPER_MU}):",
        f"{'compressor × scheduler':<{width}} " + " ".join(f"{c:>12}" for c in columns),
    ]
    for name, values in speedups.items():
        cells = [values[(rate, n)] for (rate, _), n in itertools.product(rates, sizes)]
        lines.append(f"{name:<{width}} " + " ".join(f"{v:>11.2f}x" for v in cells))
    lines += _unfitted(cluster, sizes, [bps for _, bps in rates])
    if args.plot is not None:
        shown = [c.name for c in combos if c.headline] or list(speedups)
        _draw_projection(speedups, shown, [r for r, _ in rates], sizes, args.plot)
        lines += ["", f"plot: {args.plot}"]
    return lines


def _unfitted(cluster: Cluster, sizes: Sequence[int], rates: Sequence[float]) -> list[str]:
    """A line for each measured collective that some column prices from the link instead:
    its fits do not cover that worker count, or that column's rate is another."""
    lines = []
    for collective in cluster.fitted:
        missing = [
            f"{n}@{bps / 1e6:g}mbit"
            for bps, n in itertools.product(rates, sizes)
            if bps != cluster.bandwidth_bps
            or replace(cluster, workers=n, gpus_per_node=1).fit(collective) is None
        ]
        if missing:
            lines.append(
                f"(no measured {collective} fit at {', '.join(missing)}: priced from the "
                "link's bandwidth and latency there)"
            )
    return lines


def _draw_projection(
    speedups: dict[str, dict[tuple[str, int], float]],
    shown: Sequence[str],
    rates: Sequence[str],
    sizes: Sequence[int],
    path: Path,
) -> None:
    """A line for each combination ``shown`` (the headline ones, or all when none is)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(4.2 * len(rates) + 1.5, 4.2), layout="constrained")
    axes = figure.subplots(1, len(rates), sharey=True, squeeze=False)[0]
    for ax, rate in zip(axes, rates, strict=True):
        for name in shown:
            ax.plot(sizes, [speedups[name][(rate, n)] for n in sizes], marker="o", label=name)
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(list(sizes), [str(n) for n in sizes])
        ax.set_title(f"{rate} links")
        ax.set_xlabel("workers")
    axes[0].set_ylabel("speed-up over dense WFBP (DDP)")
    figure.legend(*axes[0].get_legend_handles_labels(), loc="outside right center", fontsize=8)
    figure.savefig(path, dpi=120)


def _draw_job_timelines(
    predictor: Predictor, combos: Sequence[Combination], cluster: Cluster, path: Path
) -> None:

    simulated = {}
    for combo in combos:
        estimate = _estimate(predictor, combo, cluster)
        if estimate.simulated is not None and combo.compressor == combos[0].compressor:
            simulated[combo.name] = estimate.simulated
    if not simulated:
        raise ConfigError("--timeline: none of the chosen schedulers is simulated bucket by bucket")
    draw_timelines(simulated, path)


def _simulate(args: list[str]) -> str | None:
    parsed = _parser().parse(args)
    if parsed is None:
        return None  # the help was asked for
    return simulate(parsed)


def main(args: list[str]) -> int:
    return print_or_fail(lambda: _simulate(args))
