"""Options of the runners (``runner=local``, ``netem``, ``slurm``, ``torchrun``): what each asks
of the machine and of the cluster's queue before anything starts."""

from __future__ import annotations

import os
from collections.abc import Mapping
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
from gradsync.cluster.rates import DEFAULT_RATE, rate_problem
from gradsync.config.checks import (
    MAX_SECONDS,
    MAX_WORKERS,
    Options,
    Rule,
    option,
)
from gradsync.launch.slurm_launcher import sbatch_flag

MAX_PROCESSES = 2 * MAX_WORKERS
"""Processes of one job: its workers and as many parameter servers at most."""
MAX_QUEUE_MS = 60_000
"""A packet held a minute in the shaper's queue is a mistake, not a link."""
MAX_TIME_MIN = 366 * 24 * 60
"""A year of minutes: more is no job's time limit."""
MAX_MEM_GB = 10**5
"""Memory of one node, in GB: no node has 100 TB."""
MAX_ARRAY_PARALLELISM = 4 * 10**6
"""Slurm's largest MaxArraySize: no array runs more jobs at once."""
MAX_REQUEUES = 10**3
"""Requeues of one job: a job preempted more often than this will not finish."""


def derived_count(interpolation: str) -> Any:
    """A count a runner derives from the trainer's (``interpolation``), checked if given."""
    return option(II(interpolation), at_least=0, limit=MAX_PROCESSES)


@dataclass
class RunnerConfig(Options):
    """What the command line asks of every runner option before it starts anything."""

    GROUP: ClassVar[str] = "runner"

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
    workers: int = derived_count("trainer.processes")
    """Processes this runner starts: the workers, then any parameter servers. Derived from
    trainer.processes."""
    grace_period_s: float = option(3.0, at_least=0, limit=MAX_SECONDS)
    """How long surviving workers get to exit after one fails, before they are killed."""

    def workers_starting_here(self, workers: int) -> int | None:
        return workers  # every process of the job runs on this host


@dataclass
class NetemRunnerConfig(LocalRunnerConfig):
    _target_: str = "runners.netem.NetemRunner"
    shapes_links: ClassVar[bool] = True
    colocated: int = derived_count(
        "gradsync.colocated:${trainer.servers},${trainer.colocate_server},"
        "${gradsync.parameter_server:}"
    )
    """Parameter servers placed in worker 0's namespace (trainer.colocate_server). Derived."""
    bandwidth: str = option(
        DEFAULT_RATE, problem=lambda rate: rate_problem(rate, "runner.bandwidth")
    )
    """Rate of every worker's uplink and downlink, as tc writes it: 100mbit, 1gbit, 500kbit."""
    second_bandwidth: str | None = option(
        None, problem=lambda rate: rate_problem(rate, "runner.second_bandwidth")
    )
    """If set, every worker also gets a second link, eth1 on a bridge and subnet of its own, at
    this rate (two NICs per host, as DeFT drives them); workers find it in the environment
    (GRADSYNC_SECOND_IFNAME, GRADSYNC_SECOND_LINK_MBIT)."""
    burst: str | None = None
    """Token-bucket burst: how much may leave at the host's speed before the rate applies (tc
    sizes: 25000, 64kb). Default: what the link carries in 2 ms, so every message takes its
    bytes over the rate, as on a real link."""
    queue_ms: int = option(50, above=0, limit=MAX_QUEUE_MS)
    """Longest a packet may wait in the shaper's queue before it is dropped."""

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
    workers: int = derived_count("trainer.processes")
    """Tasks each job runs: the workers, then any parameter servers. Derived from
    trainer.processes."""
    nodes: int = option(1, at_least=1, limit=MAX_WORKERS)
    """Nodes per job; each runs trainer.workers / nodes workers (tasks)."""
    partition: str | None = None
    """Slurm partition (``--partition``); null: the cluster's default."""
    time_min: int = option(60, at_least=1, limit=MAX_TIME_MIN)
    """Time limit of each job, in minutes."""
    cpus_per_task: int = derived_count(
        "gradsync.cpus_per_task:${trainer.threads_per_worker},${trainer.loader_workers}"
    )
    """Cores per task: its compute threads and its loader processes (trainer.loader_workers;
    under auto 8 for a dataset read from disk, none for one held in memory)."""
    gpus_per_node: int | None = derived_count(
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
    mem_gb: int | None = option(None, at_least=0, hint="(0: all of it)", limit=MAX_MEM_GB)
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
    array_parallelism: int = option(256, at_least=1, limit=MAX_ARRAY_PARALLELISM)
    """At most this many jobs of the array run at once."""
    max_requeues: int = option(0, at_least=0, limit=MAX_REQUEUES)
    """Times a job that hits its time limit or is preempted is requeued; it resumes from its
    last checkpoint."""
    report_grace_s: float = option(3.0, at_least=0, limit=MAX_SECONDS)
    """How long a failed task waits for its peers' error reports before it names the first
    failure."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda o: o.workers % o.nodes == 0,
            lambda o: (
                f"trainer.workers={o.workers} does not split evenly over runner.nodes="
                f"{o.nodes}: give every node the same number of workers"
            ),
        ),
    )

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
    workers: int = derived_count("trainer.processes")
    """Processes torchrun must start in all (``--nnodes`` × ``--nproc-per-node``). Derived from
    trainer.processes."""
    report_grace_s: float = option(3.0, at_least=0, limit=MAX_SECONDS)
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


RUNNERS: Mapping[str, type[RunnerConfig]] = {
    "local": LocalRunnerConfig,
    "netem": NetemRunnerConfig,
    "slurm": SlurmRunnerConfig,
    "torchrun": TorchrunRunnerConfig,
}
"""Every ``runner=`` option; its YAML file in ``conf/runner/`` starts from it."""
