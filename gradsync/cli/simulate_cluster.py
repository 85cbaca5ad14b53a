"""The cluster ``gradsync simulate`` predicts for: the job's own (this host, or its runner's
links), or one described by ``--cluster FILE.yaml`` (or the name of one shipped with gradsync)
and the options that set the same keys (``projection/cluster_spec.py``), and the lines that say
which."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from gradsync.cli.command import checked
from gradsync.cluster.rates import bits_per_s
from gradsync.jobs.compose import ConfigError
from gradsync.measure.kept import model_option
from gradsync.projection.cluster import COLLECTIVES
from gradsync.projection.cluster_spec import (
    AlphaBetaSpec,
    ClusterSpec,
    ComputeSpec,
    Described,
    JobShape,
    ModelComputeSpec,
    SelectionSpec,
    describes_anything,
    field_check,
    load,
    path_problem,
    shipped_clusters,
    spec_problems,
)
from gradsync.train.capacity import known_spec

if TYPE_CHECKING:
    from gradsync.projection.cluster import Cluster
    from gradsync.projection.estimates import ModelProfile
    from gradsync.projection.machine import Compute
    from gradsync.projection.selection import SelectionCost

PER_ELEMENT = "/element"


def add_cluster_options(parser: argparse.ArgumentParser) -> None:
    """The options that set a cluster description's keys, each checked as it is parsed with
    the check the description declares on its key (``cluster_spec``)."""
    parser.add_argument("--cluster", type=_yaml_path)
    parser.add_argument("--compute", type=spec_value(float, ComputeSpec, "seconds", "compute"))
    parser.add_argument("--throughput", type=spec_value(float, ComputeSpec, "throughput"))
    parser.add_argument("--selection", type=_selection, action="append", default=[])
    parser.add_argument("--collective", type=_collective, action="append", default=[])
    parser.add_argument("--latency", type=spec_value(float, ClusterSpec, "latency"))
    parser.add_argument("--algorithm", type=spec_value(str, ClusterSpec, "algorithm"))
    parser.add_argument("--gpus-per-node", type=spec_value(int, ClusterSpec, "gpus_per_node"))
    parser.add_argument("--intra-bandwidth", type=spec_value(str, ClusterSpec, "intra_bandwidth"))


def _yaml_path(text: str) -> Path:
    """A cluster description's path, or the name of one shipped with gradsync."""
    shipped = shipped_clusters()
    if text in shipped:
        return shipped[text]
    path = Path(text)
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise argparse.ArgumentTypeError(
            f"{text}: give a cluster description (FILE.yaml) or the name of a shipped one: "
            f"{', '.join(shipped)}"
        )
    problem = path_problem(path)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return path


def spec_value(
    parse: Callable[[str], Any], cls: type, name: str, key: str | None = None
) -> Callable[[str], Any]:
    """An argparse type: ``parse`` the text, then check it as a cluster description checks
    ``cls``'s field ``name`` (said as ``key``, the field's name by default)."""
    # Null is the file's way to leave a key out; an option leaves it out by not being given.
    return checked(parse, replace(field_check(cls, name), nullable=False), key or name)


def _selection(text: str) -> tuple[str, SelectionSpec]:
    """``topk=2.19e-10`` (seconds per d·log2 d) or ``topk=1e-9/element``."""
    name, equals, cost = text.partition("=")
    per_element = cost.endswith(PER_ELEMENT)
    try:
        value = float(cost.removesuffix(PER_ELEMENT))
    except ValueError:
        value = None
    if not (equals and name) or value is None:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give COMPRESSOR=SECONDS (per d·log2 d) or COMPRESSOR=SECONDS/element"
        )
    spec = SelectionSpec(per_element=value) if per_element else SelectionSpec(d_log2_d=value)
    return name, _checked_spec(spec, f"selection.{name}.")


def _collective(text: str) -> tuple[str, AlphaBetaSpec]:
    """``all_gather=1.1e-2,1.7e-8@16``: a collective's α and β, at a worker count or all."""
    name, _, rest = text.partition("=")
    costs, at, count = rest.partition("@")
    try:
        alpha, beta = (float(part) for part in costs.split(","))
        workers = int(count) if at else None
    except ValueError:
        name = ""  # not of the form: said below
    if name not in COLLECTIVES:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give COLLECTIVE=ALPHA,BETA or COLLECTIVE=ALPHA,BETA@WORKERS, with "
            f"COLLECTIVE one of {', '.join(COLLECTIVES)}"
        )
    fit = AlphaBetaSpec(alpha=alpha, beta=beta, workers=workers)
    return name, _checked_spec(fit, f"{name}.")


def _checked_spec(spec: Any, prefix: str) -> Any:
    """``spec`` when every number in it is in its field's range; else the first that is not,
    as argparse's error."""
    for problem in spec_problems(spec, prefix):
        raise argparse.ArgumentTypeError(problem)
    return spec


def described(args: argparse.Namespace) -> Described | None:
    """The cluster the options describe, when they describe one (None: the job's own). An
    option replaces what the file says of the same thing: the compute, one compressor's
    selection, one collective's fit at one worker count."""
    try:
        spec = load(args.cluster, [])
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if args.compute is not None or args.throughput is not None:
        # The machines' speed at this run's job, in place of every figure the file gives.
        spec.compute = ComputeSpec(seconds=args.compute, throughput=args.throughput)
        spec.models = []
    for name, selection in args.selection:
        spec.selection[name] = selection
    for name, fit in args.collective:
        fits = getattr(spec.collectives, name)
        fits[:] = [f for f in fits if f.workers != fit.workers] + [fit]
    if args.cluster is None and not describes_anything(spec):
        return None
    return Described(spec, args.cluster)


def machines(
    description: Described | None,
    compressors: list[str],
    compute_scale: float,
    job: JobShape | None = None,
    models: list[str] | None = None,
) -> tuple[Compute | None, dict[str, SelectionCost]]:
    """The described machines' compute (for ``job``, when its figure is given per job: a
    ``models`` entry of one of ``models``) and selection costs; none for the job's own."""
    if description is None:
        return None, {}
    try:
        if job is None:
            compute = description.compute()
        else:
            compute, _ = description.compute_for(job, models or [job.model])
        selection = description.selection(compressors)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if compute is not None and compute_scale != 1.0:
        raise ConfigError(
            "--compute-scale and the cluster's compute both set the machines' speed: give one"
        )
    problem = None if job is None or compute_scale != 1.0 else description.unknown_speed(job)
    if problem is not None:
        raise ConfigError(f"{_where(description)}{problem}")
    return compute, selection


def _where(description: Described) -> str:
    return f"{description.path}: " if description.path is not None else ""


def job_shape(cfg: DictConfig) -> JobShape:
    """What a cluster description's ``models`` entries are matched on, of the composed job:
    its ``model=`` option, its images' shape (None for other inputs), batch and precision."""
    spec = known_spec(cfg)
    images = spec is not None and spec.task == "classification" and len(spec.input_shape) == 3
    shape = tuple(spec.input_shape) if spec is not None and images else None
    precision = OmegaConf.select(cfg, "trainer.precision")
    return JobShape(
        model=model_option(cfg),
        image_shape=shape,
        batch_size=int(cfg.trainer.batch_size),
        precision=str(getattr(precision, "value", precision)),
    )


def compute_entry(
    description: Described | None, job: JobShape, models: list[str]
) -> ModelComputeSpec | None:
    """The ``models`` entry of the description whose figure prices ``job``, if one does."""
    if description is None:
        return None
    return description.compute_for(job, models)[1]


def job_cluster(
    args: argparse.Namespace, cfg: DictConfig, description: Described | None
) -> Cluster:
    """The cluster of the job's own rows: the described one, or the job's (its runner's links,
    this host's cores), with ``--latency``, ``--algorithm``, ``--gpus-per-node`` and
    ``--intra-bandwidth`` over it."""
    # Deferred for start-up: it imports torch, which this module's importers may not need.
    from gradsync.measure.jobs import cluster_for

    try:
        cluster = cluster_for(cfg)
    except ValueError as exc:
        raise ConfigError(f"runner.{exc}") from None
    try:
        if description is not None:
            cluster = description.cluster(cluster)
        intra = cluster.intra_bandwidth_bps
        if args.intra_bandwidth:
            intra = bits_per_s(args.intra_bandwidth, name="--intra-bandwidth")
        return replace(
            cluster,
            latency_s=cluster.latency_s if args.latency is None else args.latency,
            algorithm=args.algorithm or cluster.algorithm,
            gpus_per_node=args.gpus_per_node or cluster.gpus_per_node,
            intra_bandwidth_bps=intra,
        )
    except ValueError as exc:
        where = "--cluster" if args.cluster is not None else "cluster"
        raise ConfigError(f"{where}: {exc}") from None


def unused_fit(args: argparse.Namespace, counts: Collection[int]) -> str | None:
    """Why a fit a ``--collective`` gives would price nothing, or None: it is at a worker count
    that no prediction at the cluster's own links is for (``counts``: the job's rows' and, at
    the cluster's rate, the projection's). Given for this run, it is a mistake (refused)."""
    shown = ", ".join(str(n) for n in sorted(counts))
    for name, fit in args.collective:
        if fit.workers is not None and fit.workers not in counts:
            return (
                f"--collective {name}=...@{fit.workers}: no prediction is for {fit.workers} "
                f"workers at the cluster's links (they are for {shown}), so the fit would go "
                f"unused: give it at one of those counts (or drop @{fit.workers}: every count), "
                f"or add {fit.workers} to --workers"
            )
    return None


def unused_file_fits(
    args: argparse.Namespace, cluster: Cluster, counts: Collection[int]
) -> list[str]:
    """A warning for each collective of the cluster file whose every fit is at counts no
    prediction is for: the file describes the cluster for many runs (fits measured once, for
    the counts some runs project to), so this run prices that collective from the links."""
    shown = ", ".join(str(n) for n in sorted(counts))
    warnings = []
    for name, fits in cluster.fitted.items():
        pinned = sorted({fit.workers for fit in fits if fit.workers is not None})
        if len(pinned) == len(fits) and not set(pinned) & set(counts):
            at = ", ".join(str(n) for n in pinned)
            warnings.append(
                f"{args.cluster}: collectives.{name} has fits at {at} workers only, and no "
                f"prediction is for those counts (they are for {shown}): priced from the links "
                f"instead (add a fit with workers: null to use it at every count)"
            )
    return warnings


def tc_rate(bps: float) -> str:
    """``bps`` as tc (and ``--bandwidths``) writes a rate: ``25gbit``, ``100mbit``."""
    return f"{bps / 1e9:g}gbit" if bps >= 1e9 else f"{bps / 1e6:g}mbit"


def _rate(bps: float) -> str:
    return f"{bps / 1e9:g} Gbit/s" if bps >= 1e9 else f"{bps / 1e6:g} Mbit/s"


def describe(cluster: Cluster) -> list[str]:
    """The cluster's lines of the output: its links, and the collectives it has fits of."""
    text = (
        f"cluster: {cluster.workers} workers, {_rate(cluster.bandwidth_bps)} links, "
        f"latency {cluster.latency_s:g} s, {cluster.algorithm} collectives"
    )
    if cluster.gpus_per_node > 1:
        text += f", {cluster.gpus_per_node} per node at {_rate(cluster.intra_bandwidth_bps)}"
    if cluster.second_bandwidth_bps:
        text += f", second link {_rate(cluster.second_bandwidth_bps)}"
    if cluster.shared_host_cores:
        text += f"; all processes on this host ({cluster.shared_host_cores} cores)"
    fits = []
    for name in COLLECTIVES:
        fit = cluster.fit(name)
        if fit is not None:
            at = f"{fit.workers} workers" if fit.workers else "any count"
            fits.append(f"{name} {fit.alpha:g} s + {fit.beta:g} s/B ({at})")
    lines = [text]
    if fits:
        lines.append("measured collectives (α + β·size): " + "; ".join(fits))
    return lines


def machines_line(
    profile: ModelProfile,
    here: ModelProfile,
    compute: Compute | None,
    selection: Mapping[str, SelectionCost],
    entry: ModelComputeSpec | None = None,
) -> str | None:
    """What the described machines change, or None when nothing is described; ``entry``: the
    ``models`` entry the compute is of."""
    if compute is None and not selection:
        return None
    parts = []
    if compute is not None:
        figure = f" for {entry.describe()}" if entry is not None else ""
        parts.append(
            f"{compute.describe()}{figure} (forward {sum(profile.forward) * 1e3:.2f} ms, backward "
            f"{sum(profile.backward) * 1e3:.2f} ms, update {profile.update * 1e3:.2f} ms, "
            f"spread as profiled: x{profile.compute / here.compute:.3g} of the profile's host)"
        )
    parts += [f"{name} compresses in {cost.describe()}" for name, cost in selection.items()]
    return "machines: " + "; ".join(parts)
