"""A cluster this host is not, described for ``gradsync simulate --cluster FILE.yaml`` (and the
options that set the same keys): its workers and links, each collective's measured cost, its
machines' compute and each compressor's selection cost on them.

Clusters shipped with gradsync (``clusters/*.yaml`` beside this module: ``shipped_clusters``) are
named by their file's stem (``--cluster h200_8x_ndr400``).

The file is checked as configs are: a structured schema (``ClusterSpec``), so an unknown key or
a value of the wrong type is one line naming it, and every number is checked as it is read
against the range its field declares (``option``: finite, and bounded where a larger value
can only be a mistake). The YAML is read without aliases and nested no deeper than the schema,
so a small file cannot expand into a large one. Every key is optional; what the file leaves
out is the job's (``trainer.workers``, ``runner.bandwidth``) or the link model's. The keys are
in the configuration reference (``docs/reference/config.md``). Torch-free.

An example, the OMGS paper's cluster (``clusters/omgs_p102_1gbe.yaml``)::

    workers: 16
    bandwidth: 1gbit
    compute: {seconds: 0.18}
    selection: {topk: {d_log2_d: 2.18896957e-10}}
    collectives:
      all_gather: [{workers: 16, alpha: 1.1e-2, beta: 1.7e-8}]
"""

from __future__ import annotations

import io
from collections import Counter
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException

from gradsync.cluster.rates import bits_per_s, rate_problem
from gradsync.config.checks import Check, option
from gradsync.projection.cluster import ALGORITHMS, AlphaBeta, Cluster
from gradsync.projection.machine import Compute
from gradsync.projection.selection import SelectionCost

MAX_PROJECTED_WORKERS = 10**6
"""The most workers a cluster (or a fit, or a projection) may have: a larger count is a typo."""
MAX_LATENCY_S = 60.0
"""The longest start-up of one message or collective, seconds."""
MAX_COMPUTE_S = 3600.0
"""The longest compute (or pass) of one iteration, seconds."""
MAX_THROUGHPUT = 1e9
"""The most training samples per second of one worker."""
MAX_SECONDS_PER_UNIT = 1e-3
"""The most seconds per byte of a collective (1 kB/s) or per element of a selection."""
MAX_GPUS_PER_NODE = 1024
MAX_BATCH = 2**20
"""The largest batch a published compute figure may be for."""
MAX_IMAGE_SIDE = 2**16
"""The largest channel count, height or width of a compute figure's input."""
PRECISIONS = ("fp32", "bf16", "fp16")
"""``trainer.precision``'s values, which a compute figure of ``models`` may be for."""
SHIPPED = Path(__file__).with_name("clusters")
"""The cluster descriptions shipped with gradsync (package data), named by their stem."""
MAX_FILE_BYTES = 2**16
"""A cluster description is a few lines; a larger file is not one (and is not read)."""
MAX_DEPTH = 8
"""How deep a cluster description's mappings and lists may nest (the schema's deepest key,
``collectives.all_gather[0].alpha``, is three levels in)."""


@dataclass
class AlphaBetaSpec:
    """One collective's measured cost: ``alpha + beta·size`` seconds."""

    alpha: float = option(MISSING, at_least=0, at_most=MAX_LATENCY_S, hint="(seconds)")
    """Seconds of start-up."""
    beta: float = option(
        MISSING, at_least=0, at_most=MAX_SECONDS_PER_UNIT, hint="(seconds per byte)"
    )
    """Seconds per byte of the collective's size as nccl-tests reports it: the bytes of an
    all-reduce or broadcast buffer, everyone's gathered bytes of an all-gather, one message of
    a point-to-point send."""
    workers: int | None = option(None, at_least=1, at_most=MAX_PROJECTED_WORKERS)
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

    seconds: float | None = option(None, above=0, at_most=MAX_COMPUTE_S, hint="(seconds)")
    """Forward + backward + update of one iteration."""
    forward: float | None = option(None, at_least=0, at_most=MAX_COMPUTE_S, hint="(seconds)")
    """Seconds of the forward pass."""
    backward: float | None = option(None, at_least=0, at_most=MAX_COMPUTE_S, hint="(seconds)")
    """Seconds of the backward pass."""
    update: float | None = option(None, at_least=0, at_most=MAX_COMPUTE_S, hint="(seconds)")
    """Seconds of the optimizer's update."""
    throughput: float | None = option(None, above=0, at_most=MAX_THROUGHPUT)
    """Training samples per second of one worker (a published figure)."""


@dataclass
class ModelComputeSpec(ComputeSpec):
    """The machines' compute for one job, as published or measured for it: the job's model
    and, where given, the input shape, batch and precision of the figure. A job takes the first
    entry whose given keys are all the job's."""

    model: str = option(MISSING)
    """The `model=` option the figure is for (`resnet50`)."""
    image_shape: list[int] | None = option(None, each=True, at_least=1, at_most=MAX_IMAGE_SIDE)
    """Channels, height, width of its inputs (`[3, 224, 224]`); null: any."""
    batch_size: int | None = option(None, at_least=1, at_most=MAX_BATCH)
    """The batch per worker it was measured at; null: any."""
    precision: str | None = option(None, choices=PRECISIONS)
    """`trainer.precision` it was measured in (fp32, bf16, fp16); null: any."""

    def matches(self, job: JobShape) -> bool:
        """Whether the figure is for ``job``: its model, and each of the rest it gives."""
        shape = None if job.image_shape is None else list(job.image_shape)
        return (
            self.model == job.model
            and self.image_shape in (None, shape)
            and self.batch_size in (None, job.batch_size)
            and self.precision in (None, job.precision)
        )

    def describe(self) -> str:
        """What the figure is for: ``resnet50 at 3x224x224, batch 64, fp32``."""
        text = self.model
        if self.image_shape:
            text += " at " + "x".join(map(str, self.image_shape))
        rest = [f"batch {self.batch_size}" if self.batch_size is not None else None, self.precision]
        return ", ".join([text, *(part for part in rest if part)])


@dataclass(frozen=True)
class JobShape:
    """What a ``models`` entry of a cluster description is matched on: the job's ``model=``
    option, its inputs' shape (None: not images), batch per worker and precision."""

    model: str
    image_shape: tuple[int, ...] | None
    batch_size: int
    precision: str

    def describe(self) -> str:
        shape = "x".join(map(str, self.image_shape)) if self.image_shape else "its inputs"
        return f"{self.model} at {shape}, batch {self.batch_size}, {self.precision}"


@dataclass
class SelectionSpec:
    """A compressor's compression time for a group of d elements on the cluster's machines:
    ``d_log2_d·d·log2 d + per_element·d`` seconds."""

    d_log2_d: float = option(0.0, at_least=0, at_most=MAX_SECONDS_PER_UNIT, hint="(seconds)")
    """Seconds per d·log2 d (a top-k's sort; the OMGS paper's γ)."""
    per_element: float = option(0.0, at_least=0, at_most=MAX_SECONDS_PER_UNIT, hint="(seconds)")
    """Seconds per element (a scan, or a measured rate)."""


@dataclass
class ClusterSpec:
    """A cluster for ``gradsync simulate`` to predict: one worker per machine (or
    ``gpus_per_node``), each with its own cores."""

    workers: int | None = option(None, at_least=1, at_most=MAX_PROJECTED_WORKERS)
    """Workers of the cluster; null: `trainer.workers`."""
    bandwidth: str | None = option(None, problem=lambda rate: rate_problem(rate, "bandwidth"))
    """Each worker's link, as tc writes it (`1gbit`); null: `runner.bandwidth`, else 1gbit."""
    latency: float | None = option(None, at_least=0, at_most=MAX_LATENCY_S, hint="(seconds)")
    """Start-up of one message, seconds, for collectives without a fit; null: 5e-05."""
    algorithm: str = option("ring", choices=ALGORITHMS)
    """All-reduce and all-gather algorithm between machines, for collectives without a fit:
    ring or tree."""
    gpus_per_node: int = option(1, at_least=1, at_most=MAX_GPUS_PER_NODE)
    """Workers per machine, talking at `intra_bandwidth` inside it."""
    intra_bandwidth: str | None = option(
        None, problem=lambda rate: rate_problem(rate, "intra_bandwidth")
    )
    """The link between the GPUs of one machine (needed with gpus_per_node above 1)."""
    compute: ComputeSpec = field(default_factory=ComputeSpec)
    """The machines' compute; none given: the profile taken here (times `--compute-scale`)."""
    models: list[ModelComputeSpec] = field(default_factory=list)
    """The machines' compute for particular jobs (`- {model: resnet50, image_shape: [3, 224,
    224], batch_size: 64, throughput: 2002}`), before `compute`; a job no entry is for takes
    `compute`, and is refused when the file gives none."""
    selection: dict[str, SelectionSpec] = field(default_factory=dict)
    """Compression cost per compressor option (`topk: {d_log2_d: 2.19e-10}`); a compressor
    not named takes its time measured here, scaled as the compute is."""
    collectives: CollectivesSpec = field(default_factory=CollectivesSpec)
    """Measured costs of collectives."""


def load(path: Path | None, settings: list[str]) -> ClusterSpec:
    """The cluster ``path`` describes (none: every key at its default) with ``settings``
    (``key=value``, as the command's options give them) over it, every number in its range;
    ValueError, in one line naming the file and key, when either does not fit the schema."""
    try:
        return _loaded(path, settings)
    except ValueError as exc:  # whatever the file holds, the message stays one line
        raise ValueError(_one_line(str(exc))) from None


def _loaded(path: Path | None, settings: list[str]) -> ClusterSpec:
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
    problems = [*spec_problems(typed), *_fit_problems(typed.collectives)]
    for problem in [*problems, *_model_problems(typed.models)]:
        raise ValueError(f"{where}: {problem}")
    return typed


def field_check(cls: type, name: str) -> Check:
    """The check ``cls``'s field ``name`` declares: what a command-line option that sets the
    same thing checks too."""
    check = next(f for f in fields(cls) if f.name == name).metadata["check"]
    assert isinstance(check, Check)
    return check


def spec_problems(spec: Any, prefix: str = "") -> list[str]:
    """Every check that a field of ``spec`` (a dataclass of this module), or of the specs it
    holds, declares and fails, each naming the field's full key (``collectives.all_gather[0]
    .alpha``)."""
    problems: list[str] = []
    for each in fields(spec):
        key, value = f"{prefix}{each.name}", getattr(spec, each.name)
        check = each.metadata.get("check")
        if check is not None:
            problem = check.failure(key, value)
            problems += [problem] if problem is not None else []
        elif is_dataclass(value):
            problems += spec_problems(value, f"{key}.")
        elif isinstance(value, list):
            for i, entry in enumerate(value):
                problems += spec_problems(entry, f"{key}[{i}].")
        elif isinstance(value, dict):
            for name, entry in value.items():
                problems += spec_problems(entry, f"{key}.{name}.")
    return problems


def _fit_problems(collectives: CollectivesSpec) -> list[str]:
    problems = []
    for name, entries in vars(collectives).items():
        twice = [n for n, times in Counter(e.workers for e in entries).items() if times > 1]
        if twice:
            at = "every count" if twice[0] is None else f"{twice[0]} workers"
            problems.append(f"collectives.{name}: two fits for the same worker count ({at})")
    return problems


def _model_problems(entries: list[ModelComputeSpec]) -> list[str]:
    """An entry of ``models`` that gives no compute, or not in one of its forms, or that
    another entry before it is for as well (the second would never be taken)."""
    problems: list[str] = []
    seen: list[tuple[Any, ...]] = []
    for i, entry in enumerate(entries):
        try:
            if _compute_of(entry) is None:
                problems.append(
                    f"models[{i}]: give its compute (seconds, or forward, backward "
                    "and update, or throughput)"
                )
        except ValueError as exc:
            problems.append(f"models[{i}]: {exc}")
        key = (entry.model, entry.image_shape, entry.batch_size, entry.precision)
        if key in seen:
            problems.append(f"models[{i}]: models[{seen.index(key)}] is for the same job")
        seen.append(key)
    return problems


def _compute_of(c: ComputeSpec) -> Compute | None:
    """The compute ``c`` gives (None: none); ValueError when it is not one of its forms."""
    given = [c.seconds, c.forward, c.backward, c.update, c.throughput]
    if all(value is None for value in given):
        return None
    return Compute(c.seconds, c.forward, c.backward, c.update, c.throughput)


def shipped_clusters() -> dict[str, Path]:
    """The cluster descriptions shipped with gradsync, by name (their file's stem)."""
    return {path.stem: path for path in sorted(SHIPPED.glob("*.yaml"))}


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


def path_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a cluster description before it is read (missing, a directory,
    too large), or None."""
    if path.is_dir():
        return f"{path} is a directory; give a YAML cluster description file"
    if not path.exists():
        return f"{path}: no such file; give a YAML cluster description"
    if not path.is_file():
        return f"{path} is not a regular file; give a YAML cluster description file"
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        return (
            f"{path} is {size:,} bytes, more than a cluster description's {MAX_FILE_BYTES:,}; "
            "give a YAML cluster description file"
        )
    return None


def _read(path: Path) -> DictConfig:
    """The mapping ``path`` holds, read only once it is known to be small, UTF-8 YAML of one
    mapping without aliases (``_shape``)."""
    problem = path_problem(path)
    if problem is not None:
        raise ValueError(problem)
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)  # one that grew since it was sized: refused
    except OSError as exc:
        message = f"{path}: cannot read it ({exc.strerror}); give a readable cluster description"
        raise ValueError(message) from None
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"{path}: more than {MAX_FILE_BYTES:,} bytes; not a cluster description")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}: byte {exc.start} (0x{data[exc.start]:02x}) is not UTF-8 text; "
            "a cluster description is a YAML text file"
        ) from None
    try:
        _shape(text, path)  # before anything is built from it
        node = OmegaConf.load(io.StringIO(text))
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: {_yaml_problem(exc)}; fix the YAML") from None
    except _Refused:
        raise
    except (OSError, ValueError, OmegaConfBaseException) as exc:  # OSError: not a mapping
        message = f"{path}: not a YAML cluster description: {_first_line(str(exc))}"
        raise ValueError(message) from None
    assert isinstance(node, DictConfig)  # _shape saw one mapping
    if not node:
        raise ValueError(
            f"{path} is empty; write the cluster's keys in it (workers, bandwidth, compute, ...: "
            "the configuration reference lists them)"
        )
    return node


_EMPTY = ("", "~", "null", "Null", "NULL")  # a plain scalar YAML reads as null
_NULL_TAGS = (None, "tag:yaml.org,2002:null")  # (another tag makes "" a string, or bytes)


class _Refused(ValueError):
    """What ``_shape`` refuses, said whole (not as a YAML reader's error)."""


def _shape(text: str, path: Path) -> None:
    """Refuse, from the parser's events alone (nothing is built yet), what no cluster
    description holds and what could make a small file large or deep: an alias, which the
    composer would expand (a "billion laughs" file), nesting deeper than ``MAX_DEPTH``,
    and a document that is a list or a single value."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            line = event.start_mark.line + 1
            raise _Refused(
                f"{path}: line {line}: YAML aliases (*{event.anchor}) are not supported in a "
                "cluster description; write the values out"
            )
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise _Refused(
                    f"{path}: line {event.start_mark.line + 1}: nested more than {MAX_DEPTH} "
                    "levels deep; a cluster description's keys nest three"
                )
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        if depth == 1 and isinstance(event, yaml.SequenceStartEvent):
            raise _Refused(f"{path}: a cluster description is a mapping of keys, not a list")
        if depth == 0 and isinstance(event, yaml.ScalarEvent):
            if event.style is None and event.tag in _NULL_TAGS and event.value in _EMPTY:
                continue  # an empty document: said once read
            raise _Refused(
                f"{path}: a cluster description is a mapping of keys, not a single value"
            )


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's whole problem in one line: where, what, and while doing what (its message
    puts each on a line of its own, and a caret under the text)."""
    if isinstance(exc, yaml.reader.ReaderError):
        return f"character #x{exc.character:04x} at position {exc.position} is not allowed in YAML"
    if not isinstance(exc, yaml.MarkedYAMLError):
        return _first_line(str(exc))
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = exc.problem or exc.context or "not YAML"
    if exc.problem and exc.context:
        started = exc.context_mark
        since = f" started at {_at(started)}" if started is not None and started != mark else ""
        what += f" ({exc.context}{since})"
    return where + what


def _at(mark: yaml.Mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "invalid cluster description"


def _one_line(text: str) -> str:
    """``text`` with every character a terminal would break a line at (or not show) written
    as its escape: a key or value from the file may hold any."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


@dataclass(frozen=True)
class Described:
    """What a ``ClusterSpec`` changes: the cluster, the machines' compute, the selections."""

    spec: ClusterSpec
    path: Path | None = None
    """The file it was read from (None: the command's options alone)."""

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
        """The measured collectives (their numbers were checked as they were read)."""
        return {
            name: tuple(AlphaBeta(e.alpha, e.beta, e.workers) for e in entries)
            for name, entries in vars(self.spec.collectives).items()
            if entries
        }

    def compute(self) -> Compute | None:
        """The machines' compute for any job, when the description gives it."""
        try:
            return _compute_of(self.spec.compute)
        except ValueError as exc:
            raise ValueError(f"compute: {exc}") from None

    def compute_for(
        self, job: JobShape, models: list[str]
    ) -> tuple[Compute | None, ModelComputeSpec | None]:
        """The machines' compute for ``job``: the first ``models`` entry for it, else
        ``compute`` (and the entry taken, or None). ValueError for an entry of a model not in
        ``models`` (the options that exist)."""
        unknown = [e.model for e in self.spec.models if e.model not in models]
        if unknown:
            raise ValueError(f"models: no model {unknown[0]!r}; valid: {', '.join(models)}")
        entry = next((e for e in self.spec.models if e.matches(job)), None)
        if entry is not None:
            return _compute_of(entry), entry
        return self.compute(), None

    def unknown_speed(self, job: JobShape) -> str | None:
        """Why the description cannot price ``job``'s compute (one line), or None: it gives
        the compute of other jobs only (``models``), and this host's would be taken for it."""
        if not self.spec.models or self.compute() is not None:
            return None
        if any(e.matches(job) for e in self.spec.models):
            return None
        known = "; ".join(e.describe() for e in self.spec.models)
        return (
            f"models: the file gives the machines' compute for {known} only, not for this job "
            f"({job.describe()}): give their speed at it with --throughput SAMPLES/S (a "
            "published figure) or --compute SECONDS, or set the job as one of those"
        )

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
