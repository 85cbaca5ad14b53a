"""A cluster this host is not, described for ``gradsync simulate --cluster FILE.yaml`` (and the
options that set the same keys): its workers and links, each collective's measured cost, its
machines' compute and each compressor's selection cost on them.

The file is checked as configs are: a structured schema (``ClusterSpec``), so an unknown key or
a value of the wrong type is one line naming it. Every key is optional; what the file leaves
out is the job's (``trainer.workers``, ``runner.bandwidth``) or the link model's. The keys are
in the configuration reference (``docs/reference/config.md``). Torch-free.

An example, the OMGS paper's cluster (``benchmarks/clusters/omgs_p102_1gbe.yaml``)::

    workers: 16
    bandwidth: 1gbit
    compute: {seconds: 0.18}
    selection: {topk: {d_log2_d: 2.18896957e-10}}
    collectives:
      all_gather: [{workers: 16, alpha: 1.1e-2, beta: 1.7e-8}]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException

from gradsync.cluster.rates import bits_per_s
from gradsync.projection.cluster import ALGORITHMS, AlphaBeta, Cluster
from gradsync.projection.machine import Compute
from gradsync.projection.selection import SelectionCost


@dataclass
class AlphaBetaSpec:
    """One collective's measured cost: ``alpha + beta·size`` seconds."""

    alpha: float = MISSING
    """Seconds of start-up."""
    beta: float = MISSING
    """Seconds per byte of the collective's size as nccl-tests reports it: the bytes of an
    all-reduce or broadcast buffer, everyone's gathered bytes of an all-gather, one message of
    a point-to-point send."""
    workers: int | None = None
    """The worker count it was measured at; null: every count without a fit of its own."""


@dataclass
class CollectivesSpec:
    """Measured costs of the collectives, each a list of fits (one per worker count, or one for
    all). A collective without a fit at the cluster's count is priced from ``bandwidth`` and
    ``latency``."""

    all_reduce: list[AlphaBetaSpec] = field(default_factory=list)
    """Fits of an all-reduce (dense methods, union sparsifiers' values, PowerSGD)."""
    all_gather: list[AlphaBetaSpec] = field(default_factory=list)
    """Fits of an all-gather (sparse values and indices, quantized payloads)."""
    broadcast: list[AlphaBetaSpec] = field(default_factory=list)
    """Fits of a broadcast."""
    point_to_point: list[AlphaBetaSpec] = field(default_factory=list)
    """Fits of one message between a worker and a parameter server."""


@dataclass
class ComputeSpec:
    """One worker's compute per iteration at ``trainer.batch_size``: give ``seconds``, or
    ``forward``, ``backward`` and ``update``, or ``throughput``. It is spread over the model's
    tensors as the profile taken here (or loaded with ``--measurements``) spreads it."""

    seconds: float | None = None
    """Forward + backward + update of one iteration."""
    forward: float | None = None
    """Seconds of the forward pass."""
    backward: float | None = None
    """Seconds of the backward pass."""
    update: float | None = None
    """Seconds of the optimizer's update."""
    throughput: float | None = None
    """Training samples per second of one worker (a published figure)."""


@dataclass
class SelectionSpec:
    """A compressor's compression time for a group of d elements on the cluster's machines:
    ``d_log2_d·d·log2 d + per_element·d`` seconds."""

    d_log2_d: float = 0.0
    """Seconds per d·log2 d (a top-k's sort; the OMGS paper's γ)."""
    per_element: float = 0.0
    """Seconds per element (a scan, or a measured rate)."""


@dataclass
class ClusterSpec:
    """A cluster for ``gradsync simulate`` to predict: one worker per machine (or
    ``gpus_per_node``), each with its own cores."""

    workers: int | None = None
    """Workers of the cluster; null: `trainer.workers`."""
    bandwidth: str | None = None
    """Each worker's link, as tc writes it (`1gbit`); null: `runner.bandwidth`, else 1gbit."""
    latency: float | None = None
    """Start-up of one message, seconds, for collectives without a fit; null: 5e-05."""
    algorithm: str = "ring"
    """All-reduce and all-gather algorithm between machines, for collectives without a fit:
    ring or tree."""
    gpus_per_node: int = 1
    """Workers per machine, talking at `intra_bandwidth` inside it."""
    intra_bandwidth: str | None = None
    """The link between the GPUs of one machine (needed with gpus_per_node above 1)."""
    compute: ComputeSpec = field(default_factory=ComputeSpec)
    """The machines' compute; none given: the profile taken here (times `--compute-scale`)."""
    selection: dict[str, SelectionSpec] = field(default_factory=dict)
    """Compression cost per compressor option (`topk: {d_log2_d: 2.19e-10}`); a compressor
    not named takes its time measured here, scaled as the compute is."""
    collectives: CollectivesSpec = field(default_factory=CollectivesSpec)
    """Measured costs of collectives."""


def load(path: Path | None, settings: list[str]) -> ClusterSpec:
    """The cluster ``path`` describes (none: every key at its default) with ``settings``
    (``key=value``, as the command's options give them) over it; ValueError, in one line
    naming the file and key, when either does not fit the schema."""
    where = "cluster options" if path is None else str(path)
    spec = OmegaConf.structured(ClusterSpec)
    if path is not None:
        spec = _merged(spec, _read(path), str(path))
    if settings:
        spec = _merged(spec, OmegaConf.from_dotlist(settings), "cluster options")
    try:
        typed = OmegaConf.to_object(spec)
    except MissingMandatoryValue as exc:
        raise ValueError(f"{where}: {exc.full_key} is missing: give it a value") from None
    except OmegaConfBaseException as exc:
        raise ValueError(f"{where}: {_first_line(str(exc))}") from None
    assert isinstance(typed, ClusterSpec)
    return typed


def _merged(spec: DictConfig, given: DictConfig, where: str) -> DictConfig:
    try:
        merged = OmegaConf.merge(spec, given)
    except ConfigKeyError as exc:
        full_key = exc.full_key or ""
        parent, _, key = full_key.rpartition(".")
        node = OmegaConf.select(spec, parent) if parent else spec
        valid = ", ".join(str(k) for k in node) if isinstance(node, DictConfig) else ""
        known = f"; valid keys{f' in {parent}' if parent else ''}: {valid}" if valid else ""
        raise ValueError(f"{where}: unknown key '{full_key}'{known}") from None
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or _first_mismatch(spec, given)
        raise ValueError(f"{where}: {key + ': ' if key else ''}{_first_line(str(exc))}") from None
    assert isinstance(merged, DictConfig)
    return merged


def _first_mismatch(spec: DictConfig, given: DictConfig, prefix: str = "") -> str:
    """The first key of ``given`` whose kind (mapping, list or value) is not the schema's: the
    key a merge error that names none is about."""
    containers = (DictConfig, ListConfig)
    for key in map(str, given):
        if key not in spec:
            continue
        ours, theirs = spec._get_node(key), given._get_node(key)
        full = f"{prefix}{key}"
        if isinstance(ours, DictConfig) and isinstance(theirs, DictConfig):
            inner = _first_mismatch(ours, theirs, f"{full}.")
            if inner:
                return inner
        elif type(ours) is not type(theirs) and (
            isinstance(ours, containers) or isinstance(theirs, containers)
        ):
            return full
    return ""


def _read(path: Path) -> DictConfig:
    if not path.is_file():
        raise ValueError(f"{path}: no such file; give a YAML cluster description")
    try:
        node = OmegaConf.load(path)
    except (OSError, ValueError, yaml.YAMLError, OmegaConfBaseException) as exc:
        message = f"{path}: not a YAML cluster description: {_first_line(str(exc))}"
        raise ValueError(message) from None
    if not isinstance(node, DictConfig):
        raise ValueError(f"{path}: a cluster description is a mapping of keys, not a list")
    return node


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "invalid cluster description"


@dataclass(frozen=True)
class Described:
    """What a ``ClusterSpec`` changes: the cluster, the machines' compute, the selections."""

    spec: ClusterSpec

    def cluster(self, job_cluster: Cluster) -> Cluster:
        """``job_cluster`` (the job's own) as the description changes it: machines of their
        own, no measurements of this host's links. ValueError names a bad key."""
        s = self.spec
        bandwidth = job_cluster.bandwidth_bps
        if s.bandwidth is not None:
            bandwidth = bits_per_s(s.bandwidth, name="bandwidth")
        intra = job_cluster.intra_bandwidth_bps
        if s.intra_bandwidth is not None:
            intra = bits_per_s(s.intra_bandwidth, name="intra_bandwidth")
        if s.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm {s.algorithm!r}: use {' or '.join(ALGORITHMS)}")
        return replace(
            job_cluster,
            workers=job_cluster.workers if s.workers is None else s.workers,
            bandwidth_bps=bandwidth,
            latency_s=job_cluster.latency_s if s.latency is None else s.latency,
            algorithm=s.algorithm,
            gpus_per_node=s.gpus_per_node,
            intra_bandwidth_bps=intra,
            second_bandwidth_bps=None,
            shared_host_cores=None,
            fitted=self.fitted(),
        )

    def fitted(self) -> dict[str, tuple[AlphaBeta, ...]]:
        fits: dict[str, tuple[AlphaBeta, ...]] = {}
        for name, entries in vars(self.spec.collectives).items():
            counts = [entry.workers for entry in entries]
            if len(set(counts)) != len(counts):
                raise ValueError(f"collectives.{name}: two fits for the same worker count")
            for entry in entries:
                costs_ok = all(math.isfinite(v) and v >= 0 for v in (entry.alpha, entry.beta))
                if not costs_ok or (entry.workers is not None and entry.workers < 1):
                    raise ValueError(
                        f"collectives.{name}: alpha and beta must be finite and >= 0, and "
                        "workers >= 1"
                    )
            if entries:
                fits[name] = tuple(AlphaBeta(e.alpha, e.beta, e.workers) for e in entries)
        return fits

    def compute(self) -> Compute | None:
        """The machines' compute, when the description gives it."""
        c = self.spec.compute
        given = [c.seconds, c.forward, c.backward, c.update, c.throughput]
        if all(value is None for value in given):
            return None
        try:
            return Compute(c.seconds, c.forward, c.backward, c.update, c.throughput)
        except ValueError as exc:
            raise ValueError(f"compute: {exc}") from None

    def selection(self, compressors: list[str]) -> dict[str, SelectionCost]:
        """Each named compressor's selection cost; ValueError for a name not in
        ``compressors`` (the options that exist)."""
        unknown = sorted(set(self.spec.selection) - set(compressors))
        if unknown:
            raise ValueError(
                f"selection.{unknown[0]}: no such compressor; valid: {', '.join(compressors)}"
            )
        costs = {}
        for name, cost in self.spec.selection.items():
            try:
                costs[name] = SelectionCost(cost.d_log2_d, cost.per_element)
            except ValueError as exc:
                raise ValueError(f"selection.{name}: {exc}") from None
        return costs


def describes_anything(spec: ClusterSpec) -> bool:
    """Whether ``spec`` differs from a description that gives nothing."""
    return _as_dict(spec) != _as_dict(ClusterSpec())


def _as_dict(spec: ClusterSpec) -> Any:
    return OmegaConf.to_container(OmegaConf.structured(spec))
