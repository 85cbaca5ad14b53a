"""The job's own schemas: the trainer's options and the root config, and what every family's
options build on (``TaskBound``, ``FileDatasetConfig``).

Every group's option is a typed dataclass, so a misspelt key or a wrong type fails when the
config is composed; its declared checks (``checks.py``) run when the composed config is turned
into objects (``OmegaConf.to_object``) in the launching process, before any output is written.
The families' options live beside their code and are registered by ``gradsync/families.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from omegaconf import II, MISSING

from gradsync.config.checks import (
    MAX_BATCH,
    MAX_CORES,
    MAX_EPOCHS,
    MAX_SECONDS,
    MAX_STEPS,
    MAX_WORKERS,
    Options,
    Rule,
    option,
    seed_option,
)


class Device(Enum):
    cpu = "cpu"
    cuda = "cuda"


class Backend(Enum):
    auto = "auto"
    nccl = "nccl"
    gloo = "gloo"


class OptimizerName(Enum):
    sgd = "sgd"
    adam = "adam"


class Precision(Enum):
    """The forward pass's arithmetic (``trainer.precision``); parameters, gradients and the
    optimizer stay in float32 (``gradsync/train/precision.py``)."""

    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class LRSchedule(Enum):
    constant = "constant"
    step = "step"
    multistep = "multistep"
    cosine = "cosine"
    poly = "poly"


MAX_LR = 1_000.0
"""A larger learning rate is a mistake (the largest in use, LSTMs' and LARS's, are tens)."""
MAX_LR_POWER = 100.0
"""A larger exponent of lr_schedule=poly drops the rate to 0 at the first step."""

LOADERS_AUTO = "auto"
"""``trainer.loader_workers=auto``: the worker's share of its cores (``data/loader_workers.py``)."""


def _loader_workers_problem(setting: str) -> str | None:
    number = setting.isascii() and setting.isdigit()  # not '²', which int() refuses
    if setting == LOADERS_AUTO or (number and int(setting) <= MAX_CORES):
        return None
    allowed = f"in [0, {MAX_CORES}]" if number else ">= 0"  # its limit, once past it
    return f"trainer.loader_workers must be auto or an integer {allowed}, got {setting}"


def _adam_betas_problem(betas: list[float]) -> str | None:
    if len(betas) == 2 and all(0 <= beta < 1 for beta in betas):
        return None
    return f"trainer.adam_betas must be two numbers in [0, 1), got {list(betas)}"


@dataclass
class TrainerConfig(Options):
    GROUP: ClassVar[str] = "trainer"
    workers: int = option(2, at_least=1, limit=MAX_WORKERS)
    """Worker processes (data-parallel ranks)."""
    device: Device = Device.cpu
    """cpu, or cuda: the workers of a node placed round robin over its visible GPUs (more
    workers than GPUs share them)."""
    backend: Backend = Backend.auto
    """The workers' collectives: auto (NCCL when every worker has a GPU of its own; gloo on
    the CPU, when workers share a GPU, and when the runner shapes the links, as runner=netem
    does), nccl or gloo (on GPUs too: it stages GPU tensors through host memory)."""
    precision: Precision = Precision.fp32
    """fp32; bf16 or fp16: the forward pass and loss under ``torch.autocast``; fp16 also scales
    the loss (``torch.amp.GradScaler``), skipping a step whose gradients overflow on any
    worker."""
    epochs: int = option(10, at_least=1, limit=MAX_EPOCHS)
    """Passes over each worker's shard of the training set."""
    max_steps: int | None = option(None, at_least=1, limit=MAX_STEPS)
    """Stop after this many optimizer steps in total (None: run all epochs)."""
    batch_size: int = option(32, at_least=1, limit=MAX_BATCH)
    """Samples per worker per step; the global batch is workers × batch_size."""
    lr: float = option(0.05, above=0, limit=MAX_LR)
    """Learning rate of the optimizer (before lr_schedule)."""
    optimizer: OptimizerName = OptimizerName.sgd
    """sgd (with momentum, nesterov, weight_decay) or adam (adam_betas, weight_decay)."""
    momentum: float = option(0.9, at_least=0, below=1)
    """SGD momentum (0: none); set 0 with compressors that apply their own (dgc)."""
    nesterov: bool = False
    """Nesterov momentum for sgd (needs momentum > 0)."""
    weight_decay: float = option(0.0, at_least=0, limit=1)
    """L2 penalty the optimizer adds to every parameter's gradient."""
    lr_schedule: LRSchedule = LRSchedule.constant
    """constant; step: times lr_gamma every lr_step_epochs; multistep: times lr_gamma at each of
    lr_milestones; cosine: to 0 over the run; poly: see lr_power."""
    lr_step_epochs: int = option(30, at_least=1, limit=MAX_EPOCHS)
    """Epochs between decays of lr_schedule=step."""
    lr_milestones: list[int] = option(default_factory=list, each=True, at_least=1, limit=MAX_EPOCHS)
    """Epochs at which lr_schedule=multistep multiplies the rate by lr_gamma."""
    lr_gamma: float = option(0.1, above=0, at_most=1)
    """Factor of each decay of lr_schedule=step and multistep."""
    lr_power: float = option(0.5, above=0, limit=MAX_LR_POWER)
    """Exponent of lr_schedule=poly: lr · (1 - step/total_steps) ** lr_power."""
    adam_betas: list[float] = option(
        default_factory=lambda: [0.9, 0.999], problem=_adam_betas_problem
    )
    """Adam's two moment decay rates (optimizer=adam)."""
    seed: int = seed_option(0)
    """Seed of the model's initialization, data order and random compressors; every worker draws the
    same model."""
    log_every: int = option(10, at_least=1, limit=MAX_STEPS)
    """Log training metrics every this many steps (metrics.jsonl, console, wandb)."""
    eval_every_epochs: int = option(1, at_least=1, limit=MAX_EPOCHS)
    """Evaluate on the test split every this many epochs (and after the last)."""
    checkpoint: bool = True
    """Save a resumable checkpoint at every epoch end and at the last step."""
    resume: str | None = None
    """A checkpoint directory, or a run directory whose latest checkpoint is used."""
    threads_per_worker: int = option(1, at_least=1, limit=MAX_CORES)
    """torch's intra-op threads in each worker process."""
    loader_workers: str = option(LOADERS_AUTO, problem=_loader_workers_problem)
    """Loader processes per worker for a dataset read from disk (imagenet; datasets held in
    memory use none): auto, the worker's share of its cores less its compute threads (at most
    16), or a number (0: load in the training process)."""
    eval_batch_size: int = option(256, at_least=1, limit=MAX_BATCH)
    """Samples per batch when evaluating."""
    comm_timeout_s: int = option(120, at_least=1, limit=MAX_SECONDS)
    """A collective that gets no reply from a peer for this long fails the job (a worker that
    hangs or died inside a collective), instead of waiting forever."""
    check_host_syncs_from: int | None = option(None, at_least=0, limit=MAX_STEPS)
    """From this step on, a training step that makes a host synchronization its scheduler and
    compressor do not declare fails the job (on a GPU, under torch.cuda's sync debug mode; on
    the CPU, the declared points reached are checked). For developers of a method; null: off."""
    servers: int = option(1, at_least=1, limit=MAX_WORKERS)
    """Parameter-server processes, started besides the workers when the scheduler uses a
    parameter server (ps_bsp, asp, ssp; osp takes exactly 1); they hold the global model and
    aggregate."""
    allow_oversubscribe: bool = False
    """Start a local or netem job even when it has more processes than this host's cores or
    memory hold (``gradsync/train/capacity.py``)."""
    colocate_server: bool = False
    """Run the servers on worker 0's host (under runner=netem: in its network namespace, so
    they share its link) instead of on hosts of their own."""
    processes: int = option(
        II(
            "gradsync.processes:${trainer.workers},${trainer.servers},${gradsync.parameter_server:}"
        ),
        at_least=1,
        limit=2 * MAX_WORKERS,
    )
    """Processes a runner starts: the workers, then the servers (ranks workers..). Derived."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda o: not (o.nesterov and o.momentum == 0),
            lambda o: "trainer.nesterov=true needs trainer.momentum > 0",
        ),
    )


# ---- what a model or dataset is for ------------------------------------------------------------
CLASSIFICATION = "classification"
LANGUAGE_MODEL = "language_model"
RECOMMENDATION = "recommendation"


class TaskBound:
    """Mixin of model and dataset schemas: the task they serve (see ``gradsync.tasks``)."""

    TASK: ClassVar[str] = CLASSIFICATION

    def task_kind(self) -> str:
        return self.TASK


# ---- datasets ---------------------------------------------------------------------------------
@runtime_checkable
class SizedDataset(Protocol):
    """A dataset schema that knows its training set's size without loading it (the launcher
    checks a global batch against it before any worker starts)."""

    def train_samples(self) -> int | None:
        """Samples in the training split, or None where counting them means loading them."""
        ...


# ---- datasets stored on disk ----------------------------------------------------------------
@dataclass
class FileDatasetConfig(TaskBound):
    """Base of every dataset read from files under ``root``.

    Subclasses list, in ``required_paths``, what must exist under ``root`` when
    ``download=false``; the launcher checks it before starting any worker.
    """

    name: ClassVar[str] = "dataset"
    streamed_from_disk: ClassVar[bool] = False
    """Read from disk per batch by loader processes (else held in memory, the whole split)."""
    root: str = "${oc.env:GRADSYNC_DATA,data}"
    """Directory holding the data (default: $GRADSYNC_DATA, else ./data)."""
    download: bool = False
    """Fetch the data into ``root`` if it is missing (needs network access)."""

    def required_paths(self) -> list[str]:
        return []

    def missing_message(self) -> str | None:
        """One line naming what is missing and how to get it, or None if all is there."""
        if self.download:
            return None
        missing = [p for p in self.required_paths() if not (Path(self.root) / p).exists()]
        if not missing:
            return None
        return (
            f"dataset {self.name} not found: expected {Path(self.root) / missing[0]}; "
            "set dataset.download=true to fetch it, or dataset.root=DIR where it is"
        )


# ---- root ---------------------------------------------------------------------------------
@dataclass
class TrainConfig:
    model: Any = MISSING
    dataset: Any = MISSING
    compressor: Any = MISSING
    feedback: Any = MISSING
    scheduler: Any = MISSING
    trainer: TrainerConfig = MISSING
    runner: Any = MISSING
    logger: Any = MISSING
    name: str = "gradsync"
    """Run name, used by loggers (wandb run group) and reports."""
