"""How many processes this host can hold, checked before a job starts them here (``runner=local``,
``runner=netem``) or ``gradsync simulate`` probes links among them.

Two limits, each a one-line reason when passed:
* cores: every process's compute threads, at most ``THREADS_PER_CORE`` per core. Past that a
  job does not fail, it crawls: 1000 workers on 2 cores were still starting minutes later.
* memory: each process's own memory, estimated as ``PROCESS_BASE_BYTES``, plus
  ``MODEL_STATE_COPIES`` times the model's parameter bytes, plus the activations one training
  batch saves for backward, against the memory available now. Both come from the model built
  on the meta device (shapes only, nothing allocated) and one forward pass of a batch of
  ``trainer.batch_size`` through it.

A GPU's memory is checked the same way where workers share it (``gpu_memory_problem``):
``CUDA_CONTEXT_BYTES`` per worker plus the same model state and activations, times the workers
one GPU holds, against the GPU's memory.

Sizing the model means importing torch and the model's code (5-8 s on a small, busy host), so
each size is kept in a small cache (``model_sizes.json`` in the user's cache directory): the
jobs of a sweep, and later runs of the same model, dataset, batch and versions, do not pay for
it again, and a dataset whose shapes only its files tell is remembered as such. Composing a
job tries its model on that batch (``shape_check.py``) and fills the cache; the memory check
reads it only for jobs with more processes than cores, where memory per process decides
whether the host holds them (below that only the base is counted). (A model edited in place
under the same version keeps its old size until that file is removed.)
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from gradsync.config.instantiate import build
from gradsync.metrics.summary import package_versions

if TYPE_CHECKING:
    from gradsync.data.spec import DataSpec

THREADS_PER_CORE = 8
"""Compute threads per core a job may start (eight workers on two cores, as the reproductions
run, is 4)."""
PROCESS_BASE_BYTES = 400 * 2**20
"""A worker's own memory besides its model: Python, torch, gloo, a batch (measured: 380 MB
anonymous memory for a worker training the default CNN; the libraries' mapped files are
shared between processes and not counted)."""
MODEL_STATE_COPIES = 5
"""Model-sized buffers a worker holds besides activations: parameters, gradients, optimizer
state, an error-feedback residual, flat copies for the exchange (measured peaks: GPT-2 with a
10k vocabulary at batch 32 x 128, 6.2 GB for 357 MB of parameters and 4.2 GB of saved
activations; ResNet-18 on CIFAR at batch 32, 0.7 GB)."""
CUDA_CONTEXT_BYTES = 1 * 2**30
"""A GPU worker's own device memory besides its model: the CUDA context, cuBLAS and cuDNN
workspaces and the caching allocator's slack (a context alone is 0.5 GB on recent GPUs)."""
FORCE = "trainer.allow_oversubscribe=true"
"""The override that skips these checks."""


@dataclass(frozen=True)
class Host:
    cores: int
    available_bytes: int | None
    """Memory available to new processes now; None where the system does not say."""

    @classmethod
    def this(cls) -> Host:
        try:
            cores = len(os.sched_getaffinity(0))  # the cores this process may use
        except AttributeError:
            cores = os.cpu_count() or 1
        return cls(cores=cores, available_bytes=_available_memory())


# A container's (or a Slurm job's) own memory limit and use: cgroup v2, then v1.
CGROUP_MEMORY = (
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
)


def _available_memory() -> int | None:
    """The host's available memory, or the room left under this process's cgroup limit when
    that is smaller (a container, a Slurm allocation)."""
    available = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError):
        pass
    for limit_file, usage_file in CGROUP_MEMORY:
        try:
            limit, usage = (Path(f).read_text().strip() for f in (limit_file, usage_file))
            if limit != "max":
                available.append(max(0, int(limit) - int(usage)))
            break
        except (OSError, ValueError):
            continue
    return min(available) if available else None


def processes_problem(processes: int, threads: int, host: Host) -> str | None:
    """Why ``processes`` of ``threads`` compute threads each are too many for the cores of
    ``host`` (None: they fit)."""
    limit = host.cores * THREADS_PER_CORE
    if processes * threads <= limit:
        return None
    what = f"{processes} processes" + (f" of {threads} threads" if threads > 1 else "")
    return (
        f"{what} are more than this host's {host.cores} cores can run (at most {limit} "
        f"threads, {THREADS_PER_CORE} per core)"
    )


def memory_problem(processes: int, process_bytes: int, host: Host) -> str | None:
    """Why ``processes`` of ``process_bytes`` each do not fit in ``host``'s available memory."""
    if host.available_bytes is None or processes * process_bytes <= host.available_bytes:
        return None
    return (
        f"{processes} processes need about {processes * process_bytes / 2**30:.1f} GiB "
        f"({process_bytes / 2**20:.0f} MiB each), more than the "
        f"{host.available_bytes / 2**30:.1f} GiB of memory this host has available"
    )


@dataclass(frozen=True)
class ModelSize:
    """What a worker's memory grows with, beside its fixed cost."""

    parameter_bytes: int
    activation_bytes: int
    """What one training batch of ``trainer.batch_size`` saves for backward."""

    def state_bytes(self) -> int:
        return MODEL_STATE_COPIES * self.parameter_bytes + self.activation_bytes


def process_bytes(cfg: DictConfig) -> int:
    """A worker's estimated host memory: the base, plus its model's state and activations."""
    size = model_size(cfg)
    return PROCESS_BASE_BYTES + (size.state_bytes() if size is not None else 0)


def gpu_worker_bytes(cfg: DictConfig) -> int:
    """A GPU worker's estimated device memory: its CUDA context and workspaces, plus its
    model's state and one batch's activations (``CUDA_CONTEXT_BYTES``; a dataset held on the
    device is not counted)."""
    size = model_size(cfg)
    return CUDA_CONTEXT_BYTES + (size.state_bytes() if size is not None else 0)


def model_size(cfg: DictConfig) -> ModelSize | None:
    """The model's size (``measure_model``), from the cache when it was sized before; None when
    its shapes are not known before the dataset is read."""
    found, size = _cached(cfg)
    if found:
        return size
    try:
        size = measure_model(cfg)
    except Exception:  # a model that fails on its shapes: composing it said why
        return None
    remember_size(cfg, size)
    return size


_SEEN: dict[Path, dict[str, ModelSize | None]] = {}
"""Each cache file's entries as this process last read or wrote them: the jobs of a sweep and
the alternatives ``gradsync simulate`` composes look a size up without reading the file again.
None: the dataset's shapes are known only once it is read, so the model was not sized."""


def sized_before(cfg: DictConfig) -> bool:
    """Whether this process or an earlier one sized the job's model at its batch (or found
    that only its data can tell), with these settings and versions."""
    return _cached(cfg)[0]


def remember_size(cfg: DictConfig, size: ModelSize | None) -> None:
    """Keep ``size`` (None: not known before the data is read) as the job's model's size at its
    batch, for this process and later ones."""
    cache = _cache_file()
    known = {**_read_cache(cache), **_SEEN.get(cache, {}), size_key(cfg): size}
    _SEEN[cache] = known
    _write_cache(cache, known)


def _cached(cfg: DictConfig) -> tuple[bool, ModelSize | None]:
    """(whether the job's model was sized before, its size)."""
    cache, key = _cache_file(), size_key(cfg)
    if key not in _SEEN.get(cache, {}):
        # Another process may have sized it since (one that cannot write keeps its own).
        _SEEN[cache] = {**_read_cache(cache), **_SEEN.get(cache, {})}
    known = _SEEN[cache]
    return key in known, known.get(key)


def size_key(cfg: DictConfig) -> str:
    """What a model's size depends on: the model and dataset settings, the batch, the versions."""
    parts = [
        OmegaConf.to_yaml(cfg.model, resolve=True),
        OmegaConf.to_yaml(cfg.dataset, resolve=True),
        str(cfg.trainer.batch_size),
        _versions(),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


@cache
def _versions() -> str:
    # Read once: a process's packages do not change, and a sweep keys every job.
    return json.dumps(package_versions(), sort_keys=True)


def _cache_file() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "gradsync" / "model_sizes.json"


def _read_cache(path: Path) -> dict[str, ModelSize | None]:
    try:
        known = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # none yet, or damaged: sized again
    if not isinstance(known, dict):
        return {}
    return {
        key: None if value is None else ModelSize(*value)
        for key, value in known.items()
        if value is None
        or (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value))
    }


def _write_cache(path: Path, known: dict[str, ModelSize | None]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        entries = {
            key: None if s is None else [s.parameter_bytes, s.activation_bytes]
            for key, s in known.items()
        }
        partial.write_text(json.dumps(entries), encoding="utf-8")
        os.replace(partial, path)  # a concurrent writer's entries may be lost: sized again
    except OSError:
        pass  # a read-only home: size it again next time


def known_spec(cfg: DictConfig) -> DataSpec | None:
    """The shapes of the job's dataset, when they are known before it is read (None: only its
    files say, as a corpus's vocabulary)."""
    dataset = build(cfg.dataset, path="dataset")
    return dataset.known_spec() if hasattr(dataset, "known_spec") else None


def measure_model(cfg: DictConfig) -> ModelSize | None:
    """The model's parameter bytes and one batch's saved activations, when the dataset's shapes
    are known before it is read (None otherwise). What the model raises on that batch, it
    raises here."""
    # Deferred for start-up: the command line imports this module, and only a job whose size
    # is not cached yet pays for torch and the model's code.
    import torch

    from gradsync.tasks import build_task
    from gradsync.train.build import build_model

    spec = known_spec(cfg)
    if spec is None:
        return None
    saved: list[int] = []

    def keep_size(tensor: torch.Tensor) -> torch.Tensor:
        saved.append(tensor.numel() * tensor.element_size())
        return tensor

    # Shapes only: nothing is allocated or computed. What torch warns of here (a layer of zero
    # elements, built for too small an image) is no news to the user: the failure it leads to
    # is said in one line by the check that tried the model (``shape_check.py``).
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = build_model(cfg, spec)
        task = build_task(spec)
        with torch.autograd.graph.saved_tensors_hooks(keep_size, lambda tensor: tensor):
            task.loss(model, task.example_batch(int(cfg.trainer.batch_size)))
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return ModelSize(parameter_bytes=parameter_bytes, activation_bytes=sum(saved))


def gpu_memory_problem(
    *, worker_bytes: int, workers_per_gpu: int, gpu_bytes: int, where: str
) -> str | None:
    """Why ``workers_per_gpu`` workers of ``worker_bytes`` each do not fit in one GPU of
    ``gpu_bytes`` (one line), or None."""
    if workers_per_gpu * worker_bytes <= gpu_bytes:
        return None
    who = f"{workers_per_gpu} workers" if workers_per_gpu > 1 else "a worker"
    return (
        f"{who} on one GPU of {where} need about "
        f"{workers_per_gpu * worker_bytes / 2**30:.1f} GiB ({worker_bytes / 2**30:.1f} GiB each: "
        f"model, optimizer state, activations at trainer.batch_size), more than its "
        f"{gpu_bytes / 2**30:.1f} GiB; lower trainer.batch_size or the workers per GPU, or "
        f"set {FORCE}"
    )


def gpu_sharing_problem(
    cfg: DictConfig, *, workers_per_gpu: int, gpu_bytes: int, where: str
) -> str | None:
    """Why the GPUs of ``where`` (``gpu_bytes`` each) cannot hold ``workers_per_gpu`` workers of
    the job ``cfg`` each (None: they can, one worker per GPU is not sized, or ``FORCE``)."""
    if workers_per_gpu < 2 or cfg.trainer.allow_oversubscribe:
        return None
    return gpu_memory_problem(
        worker_bytes=gpu_worker_bytes(cfg),
        workers_per_gpu=workers_per_gpu,
        gpu_bytes=gpu_bytes,
        where=where,
    )


def capacity_problem(cfg: DictConfig, processes: int, host: Host | None = None) -> str | None:
    """Why this host cannot hold ``processes`` of the job ``cfg`` (None: it can, or the job
    says to start them anyway with ``FORCE``)."""
    if cfg.trainer.allow_oversubscribe:
        return None
    host = host or Host.this()
    threads = int(cfg.trainer.threads_per_worker)
    problem = processes_problem(processes, threads, host)
    problem = problem or memory_problem(processes, PROCESS_BASE_BYTES, host)
    if problem is None and processes > host.cores:
        problem = memory_problem(processes, process_bytes(cfg), host)
    return problem
