"""Schemas of the foundation's options (digits, mlp/cnn, none/randomk, allreduce, local, ...).

Every module in this package may define ``SCHEMAS = {group: {option: dataclass}}``;
``register_schemas`` collects them all, so a new option adds a module (or an entry) here and a
YAML file, and edits nothing else.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from omegaconf import II

from gradsync.cluster.devices import workers_on_node
from gradsync.cluster.env import DistEnv
from gradsync.cluster.host_checks import (
    missing_netem_requirement,
    missing_sbatch,
    missing_torchrun_env,
    refused_submission,
)
from gradsync.cluster.rates import DEFAULT_RATE, rate_mbit
from gradsync.compressors.warmup import DEFAULT_WARMUP_DENSITY
from gradsync.config.checks import require
from gradsync.config.schema import TaskBound, TrainerConfig


# ---- models -------------------------------------------------------------------------------
@dataclass
class MLPConfig(TaskBound):
    _target_: str = "gradsync.models.mlp.MLP"
    _partial_: bool = True
    hidden: list[int] = field(default_factory=lambda: [128, 64])
    """Widths of the hidden layers, input to output."""

    def __post_init__(self) -> None:
        require(all(h >= 1 for h in self.hidden), "model.hidden sizes must be >= 1")


@dataclass
class CNNConfig(TaskBound):
    _target_: str = "gradsync.models.cnn.CNN"
    _partial_: bool = True
    channels: list[int] = field(default_factory=lambda: [16, 32])
    """Output channels of each 3×3 convolution (ReLU after each; one 2×2 max-pool after the
    last)."""
    hidden: int = 64
    """Width of the fully connected layer before the classifier."""

    def __post_init__(self) -> None:
        require(len(self.channels) >= 1, "model.channels needs at least one entry")
        require(all(c >= 1 for c in self.channels), "model.channels must be >= 1")
        require(self.hidden >= 1, "model.hidden must be >= 1")


# ---- datasets -----------------------------------------------------------------------------
DIGITS = 1797
"""Images in scikit-learn's bundled digits (``dataset=digits``)."""


@dataclass
class DigitsConfig(TaskBound):
    _target_: str = "gradsync.data.digits.Digits"
    test_fraction: float = 0.2
    """Fraction of scikit-learn's 1,797 digits held out as the test split."""
    split_seed: int = 0
    """Seed of the train/test split (fixed, so every run tests on the same images)."""

    def __post_init__(self) -> None:
        require(
            0 < self.test_fraction < 1,
            f"dataset.test_fraction must be in (0, 1), got {self.test_fraction}",
        )

    def train_samples(self) -> int:
        return DIGITS - round(self.test_fraction * DIGITS)  # as gradsync.data.digits splits


# ---- compressors --------------------------------------------------------------------------
class CompressorConfig:
    """Base of every compressor option's schema: what the compressor asks of the rest of the
    job, checked for every option alike when a config is composed (``check_config``)."""

    applies_momentum: ClassVar[bool] = False
    """The compressor applies momentum to what it sends (DGC's momentum correction, its
    ``momentum`` option), so the optimizer steps without any (``build_optimizer``)."""
    keeps_own_residual: ClassVar[bool] = False
    """The compressor accumulates what it did not send itself (DGC, PowerSGD): an
    error-feedback residual on top would keep it twice, so a feedback that always keeps one is
    refused."""
    needs_its_exchange_back: ClassVar[bool] = False
    """Its memory needs the exchange's result on the worker (PowerSGD's error is the compensated
    gradient less the workers' mean), which a parameter server keeps: refused with one."""


@dataclass
class NoneCompressorConfig(CompressorConfig):
    _target_: str = "gradsync.compressors.none.NoneCompressor"


@dataclass
class SparsifierConfig(CompressorConfig):
    """Shared by every compressor that keeps a fraction ``density`` of the gradient."""

    density: float = 0.01
    """Fraction of the elements each worker selects (k = int(density · elements)), after the
    warm-up."""
    warmup_epochs: int = 0
    """DGC's density warm-up: over the first warmup_epochs epochs the density falls
    exponentially from warmup_density to density (epoch e: warmup_density ·
    (density/warmup_density)^(e/warmup_epochs)); 0: no warm-up."""
    warmup_density: float = DEFAULT_WARMUP_DENSITY
    """The density of the first epoch when warmup_epochs > 0 (DGC: 0.25, i.e. 75% sparsity)."""

    def __post_init__(self) -> None:
        require(
            0 < self.density <= 1,
            f"compressor.density must be in (0, 1], got {self.density}",
        )
        require(
            self.warmup_epochs >= 0,
            f"compressor.warmup_epochs must be >= 0 (0: no warm-up), got {self.warmup_epochs}",
        )
        require(
            0 < self.warmup_density <= 1,
            f"compressor.warmup_density must be in (0, 1], got {self.warmup_density}",
        )
        require(
            self.warmup_epochs == 0 or self.warmup_density >= self.density,
            f"compressor.warmup_density ({self.warmup_density}) must be >= compressor.density "
            f"({self.density}): the warm-up starts denser and decays to it",
        )


@dataclass
class RandomKConfig(SparsifierConfig):
    _target_: str = "gradsync.compressors.randomk.RandomKCompressor"
    seed: int = II("trainer.seed")
    """Seed of the random index selection; every worker draws the same indices (default:
    trainer.seed)."""


# ---- error feedback -----------------------------------------------------------------------
# Each option is a policy: built with the run's compressor, it returns the memory to keep.
class FeedbackConfig:
    """Base of every feedback option's schema."""

    always_keeps_residual: ClassVar[bool] = False
    """Keeps a residual whatever the compressor declares (lossless ones aside)."""


@dataclass
class AutoFeedbackConfig(FeedbackConfig):
    _target_: str = "gradsync.feedback.auto.for_compressor"


@dataclass
class NoneFeedbackConfig(FeedbackConfig):
    _target_: str = "gradsync.feedback.none.for_compressor"


@dataclass
class ResidualFeedbackConfig(FeedbackConfig):
    _target_: str = "gradsync.feedback.residual.for_compressor"
    always_keeps_residual: ClassVar[bool] = True


# ---- runners ------------------------------------------------------------------------------
@dataclass
class RunnerConfig:
    """What the command line asks of every runner option before it starts anything."""

    submits_through_launcher: ClassVar[bool] = False
    """True: jobs go through a Hydra launcher (a cluster's queue), so even one job is a sweep."""
    starts_processes_here: ClassVar[bool] = False
    """True: every process of a job runs on the host that launches it, which must hold them."""
    shapes_links: ClassVar[bool] = False
    """True: the job's links are shaped on this host (a rate, a token bucket), so what a job
    measures of them in its first steps is what the shaper lets through."""

    def machine_problem(self) -> str | None:
        """Why this runner cannot start jobs on this machine (one line), or None."""
        return None

    def workers_starting_here(self, workers: int) -> int | None:
        """How many of a job's ``workers`` this host starts, which share its GPUs under
        trainer.device=cuda; None when they start elsewhere (a cluster's nodes), where each
        worker checks its own node."""
        return None

    @staticmethod
    def launcher_overrides(jobs: list[Any]) -> list[str]:
        """Hydra launcher settings that depend on the whole sweep (``jobs``: each job's typed
        runner config)."""
        return []

    @staticmethod
    def submission_problem(jobs: list[Any]) -> str | None:
        """Why the cluster's queue would refuse these jobs (one line), asked before anything
        is written; None when it would take them, or when nothing is submitted to a queue."""
        return None


@dataclass
class LocalRunnerConfig(RunnerConfig):
    _target_: str = "runners.local.LocalRunner"
    starts_processes_here: ClassVar[bool] = True
    workers: int = II("trainer.processes")
    """Processes this runner starts: the workers, then any parameter servers. Derived from
    trainer.processes."""
    grace_period_s: float = 3.0
    """How long surviving workers get to exit after one fails, before they are killed."""

    def __post_init__(self) -> None:
        require(self.grace_period_s >= 0, "runner.grace_period_s must be >= 0")

    def workers_starting_here(self, workers: int) -> int | None:
        return workers  # every process of the job runs on this host


@dataclass
class NetemRunnerConfig(LocalRunnerConfig):
    _target_: str = "runners.netem.NetemRunner"
    shapes_links: ClassVar[bool] = True
    colocated: int = II(
        "gradsync.colocated:${trainer.servers},${trainer.colocate_server},"
        "${gradsync.parameter_server:}"
    )
    """Parameter servers placed in worker 0's namespace (trainer.colocate_server). Derived."""
    bandwidth: str = DEFAULT_RATE
    """Rate of every worker's uplink and downlink, as tc writes it: 100mbit, 1gbit, 500kbit."""
    second_bandwidth: str | None = None
    """If set, every worker also gets a second link, eth1 on a bridge and subnet of its own, at
    this rate (two NICs per host, as DeFT drives them); workers find it in the environment
    (GRADSYNC_SECOND_IFNAME, GRADSYNC_SECOND_LINK_MBIT)."""
    burst: str | None = None
    """Token-bucket burst: how much may leave at the host's speed before the rate applies (tc
    sizes: 25000, 64kb). Default: what the link carries in 2 ms, so every message takes its
    bytes over the rate, as on a real link."""
    queue_ms: int = 50
    """Longest a packet may wait in the shaper's queue before it is dropped."""

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            rate_mbit(self.bandwidth)
            if self.second_bandwidth is not None:
                rate_mbit(self.second_bandwidth, name="second_bandwidth")
        except ValueError as exc:
            raise ValueError(f"runner.{exc}") from None
        require(self.queue_ms > 0, f"runner.queue_ms must be > 0, got {self.queue_ms}")

    def machine_problem(self) -> str | None:
        return missing_netem_requirement()


@dataclass(frozen=True)
class ArrayShape:
    """Per node and per task, what every element of a Slurm sweep's one job array asks for
    (hydra.launcher's keys of the same names)."""

    tasks_per_node: int
    gpus_per_node: int | None
    cpus_per_task: int


@dataclass
class SlurmRunnerConfig(RunnerConfig):
    """Resources of every job of a sweep submitted to Slurm (one array element per job)."""

    _target_: str = "runners.slurm.SlurmRunner"
    submits_through_launcher: ClassVar[bool] = True
    ONE_PER_ARRAY: ClassVar[tuple[str, ...]] = (
        "nodes", "partition", "time_min", "gres", "constraint", "exclude", "mem_gb",
        "account", "qos", "setup", "srun_args", "additional_parameters", "array_parallelism",
        "max_requeues",
    )  # fmt: skip
    """What Hydra's launcher asks once for the whole array: the same for every job of a sweep
    (what jobs derive from swept trainer values, tasks, GPUs and cores, is ``_array_shape``'s)."""
    workers: int = II("trainer.processes")
    """Tasks each job runs: the workers, then any parameter servers. Derived from
    trainer.processes."""
    nodes: int = 1
    """Nodes per job; each runs trainer.workers / nodes workers (tasks)."""
    partition: str | None = None
    """Slurm partition (``--partition``); null: the cluster's default."""
    time_min: int = 60
    """Time limit of each job, in minutes."""
    cpus_per_task: int = II(
        "gradsync.cpus_per_task:${trainer.threads_per_worker},${trainer.loader_workers}"
    )
    """Cores per task: its compute threads and its loader processes (trainer.loader_workers;
    under auto 8 for a dataset read from disk, none for one held in memory)."""
    gpus_per_node: int | None = II(
        "gradsync.gpus_per_node:${trainer.device},${trainer.workers},${runner.workers},"
        "${runner.nodes},${runner.gres}"
    )
    """GPUs to request per node (``--gpus-per-node``). Derived: with trainer.device=cuda, one
    for each worker of a node (none when runner.gres asks for them); none on CPU."""
    gres: str | None = None
    """Generic resources, as sbatch's ``--gres`` takes them (``gpu:a100:8``): for sites that
    want GPUs asked for this way; then no ``--gpus-per-node`` is added."""
    constraint: str | None = None
    """Node features the job needs (``--constraint``, e.g. ``a100&ib``)."""
    exclude: str | None = None
    """Nodes the job must not run on (``--exclude``, e.g. ``gpu[07-08]``)."""
    mem_gb: int | None = None
    """Memory per node in GB (``--mem``); null: the cluster's default."""
    account: str | None = None
    """Account charged for the job (``--account``); null: your default."""
    qos: str | None = None
    """Quality of service (``--qos``); null: the default."""
    setup: list[str] = field(default_factory=list)
    """Shell lines the job script runs before srun starts the tasks (``module load cuda``,
    ``source venv/bin/activate``, ``export NCCL_SOCKET_IFNAME=ib0``)."""
    srun_args: list[str] = field(default_factory=list)
    """Extra arguments of the ``srun`` that starts the tasks (``--cpu-bind=none``)."""
    additional_parameters: dict[str, Any] = field(default_factory=dict)
    """Any other sbatch option, name without dashes to value, each added with a ``+``
    (``+runner.additional_parameters.mail-type=END``): each becomes ``#SBATCH --name=value``."""
    array_parallelism: int = 256
    """At most this many jobs of the array run at once."""
    max_requeues: int = 0
    """Times a job that hits its time limit or is preempted is requeued; it resumes from its
    last checkpoint."""
    report_grace_s: float = 3.0
    """How long a failed task waits for its peers' error reports before it names the first
    failure."""

    def __post_init__(self) -> None:
        require(self.nodes >= 1, f"runner.nodes must be >= 1, got {self.nodes}")
        require(
            self.workers % self.nodes == 0,
            f"trainer.workers={self.workers} does not split evenly over runner.nodes="
            f"{self.nodes}: give every node the same number of workers",
        )
        require(self.time_min >= 1, f"runner.time_min must be >= 1, got {self.time_min}")
        require(self.max_requeues >= 0, "runner.max_requeues must be >= 0")

    def machine_problem(self) -> str | None:
        return missing_sbatch()

    @staticmethod
    def launcher_overrides(jobs: list[Any]) -> list[str]:
        shape = asdict(SlurmRunnerConfig._array_shape(jobs))
        return [
            f"hydra.launcher.{key}={value}" for key, value in shape.items() if value is not None
        ]

    @staticmethod
    def _array_shape(jobs: list[SlurmRunnerConfig]) -> ArrayShape:
        """What each element of the sweep's one array asks for per node and task: the largest
        job's. Hydra resolves its launcher once, from the command's values without the swept
        ones, so what the jobs derive from swept values (tasks and GPUs from trainer.workers,
        cores from trainer.threads_per_worker) is set on the launcher here. A job with fewer
        workers leaves the extra tasks (and GPUs) idle."""
        for key in SlurmRunnerConfig.ONE_PER_ARRAY:
            values = {repr(getattr(job, key)) for job in jobs}
            if len(values) > 1:
                raise ValueError(
                    f"runner.{key} cannot differ between jobs of one Slurm sweep (one job "
                    f"array, one set of resources); run one sweep per value of runner.{key}"
                )
        gpus = [job.gpus_per_node for job in jobs if job.gpus_per_node is not None]
        return ArrayShape(
            tasks_per_node=max(job.workers for job in jobs) // jobs[0].nodes,
            gpus_per_node=max(gpus, default=None),
            cpus_per_task=max(job.cpus_per_task for job in jobs),
        )

    @staticmethod
    def submission_problem(jobs: list[Any]) -> str | None:
        # Asked of Slurm itself (sbatch --test-only), with the resources the array will ask for.
        shape = SlurmRunnerConfig._array_shape(jobs)
        for options in dict.fromkeys(tuple(job.sbatch_options(shape)) for job in jobs):
            refused = refused_submission(list(options))
            if refused is not None:
                return (
                    f"Slurm refuses the jobs' resources: {refused}; check runner.partition, "
                    "runner.time_min, runner.gpus_per_node, runner.gres, runner.constraint, "
                    "runner.exclude, runner.mem_gb, runner.account, runner.qos and "
                    "runner.additional_parameters against the cluster (sinfo, sacctmgr)"
                )
        return None

    def sbatch_options(self, shape: ArrayShape) -> list[str]:
        """The resources submitit asks sbatch for (hydra.launcher in runner/slurm.yaml), in an
        array of ``shape``."""
        from gradsync.config.slurm_launcher import sbatch_flag

        options = [
            f"--nodes={self.nodes}",
            f"--ntasks-per-node={shape.tasks_per_node}",
            f"--cpus-per-task={shape.cpus_per_task}",
            f"--time={self.time_min}",
        ]
        optional = {
            "partition": self.partition,
            "gpus_per_node": shape.gpus_per_node,
            "gres": self.gres,
            "constraint": self.constraint,
            "exclude": self.exclude,
            "mem": None if self.mem_gb is None else f"{self.mem_gb}GB",
            "account": self.account,
            "qos": self.qos,
            **self.additional_parameters,
        }
        return options + [
            sbatch_flag(name, value) for name, value in optional.items() if value is not None
        ]


@dataclass
class TorchrunRunnerConfig(RunnerConfig):
    """For jobs started by torchrun, which starts one gradsync process per worker."""

    _target_: str = "runners.torchrun.TorchrunRunner"
    workers: int = II("trainer.processes")
    """Processes torchrun must start in all (``--nnodes`` × ``--nproc-per-node``). Derived from
    trainer.processes."""
    report_grace_s: float = 3.0
    """How long a failed process waits for its peers' error reports before it names the first
    failure."""

    def workers_starting_here(self, workers: int) -> int | None:
        # This node's processes (torchrun's LOCAL_WORLD_SIZE), of which those below
        # trainer.workers are workers; each node's torchrun checks its own.
        if missing_torchrun_env() is not None:
            return None  # not under torchrun: machine_problem says so
        env = DistEnv.from_environ()
        return workers_on_node(
            rank=env.rank,
            local_rank=env.local_rank,
            local_world_size=env.local_world_size,
            workers=workers,
        )

    def machine_problem(self) -> str | None:
        problem = missing_torchrun_env()
        started = int(os.environ.get("WORLD_SIZE", "0"))
        if problem is None and started != self.workers:
            problem = (
                f"trainer.workers={self.workers} but torchrun started {started} processes: "
                f"pass trainer.workers={started}"
            )
        return problem


# ---- loggers ------------------------------------------------------------------------------
@dataclass
class WandbConfig:
    project: str = "gradsync"
    """wandb project the run is logged to."""
    entity: str | None = None
    """wandb user or team; null: the client's default."""
    group: str | None = None
    """wandb run group; null: the run's name."""
    tags: list[str] = field(default_factory=list)
    """wandb tags of the run."""
    mode: str = "offline"
    """offline (default), online or disabled; WANDB_MODE in the environment takes precedence."""

    def __post_init__(self) -> None:
        modes = ("offline", "online", "disabled")
        require(self.mode in modes, f"logger.wandb.mode must be one of {', '.join(modes)}")


@dataclass
class LoggerConfig:
    progress: bool = True
    """tqdm progress bar on rank 0 (only when the terminal is interactive)."""
    wandb: WandbConfig | None = None
    """Settings of the wandb client; null: no wandb (logger=console)."""


SCHEMAS: dict[str, dict[str, type]] = {
    "trainer": {"default": TrainerConfig},
    "model": {"mlp": MLPConfig, "cnn": CNNConfig},
    "dataset": {"digits": DigitsConfig},
    "compressor": {"none": NoneCompressorConfig, "randomk": RandomKConfig},
    "feedback": {
        "auto": AutoFeedbackConfig,
        "none": NoneFeedbackConfig,
        "residual": ResidualFeedbackConfig,
    },
    "runner": {
        "local": LocalRunnerConfig,
        "netem": NetemRunnerConfig,
        "slurm": SlurmRunnerConfig,
        "torchrun": TorchrunRunnerConfig,
    },
    "logger": {"console": LoggerConfig, "wandb": LoggerConfig},
}
