"""Compose and check every job of a command before anything runs or any directory is created.

Hydra reports bad input as multi-line messages (or tracebacks); gradsync turns each into one
line that says what to do (``ConfigError``), and runs the schemas' range checks and the checks
that depend on this machine (CUDA, resume paths) up front, for every job of a sweep.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from pathlib import Path

from hydra import compose, initialize_config_module
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob, Override, OverrideType
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    OmegaConfBaseException,
)

from gradsync import families
from gradsync.cluster.backends import BackendRefused, choose_backends
from gradsync.cluster.devices import missing_gpu, workers_per_gpu
from gradsync.compressors.options.base import CompressorConfig
from gradsync.compressors.registry import compressor_name
from gradsync.config.checks import too_few_samples
from gradsync.config.files import CONFIG_MODULE, KEYLESS_GROUP, ROOT_CONFIG
from gradsync.config.schema import (
    Device,
    FileDatasetConfig,
    Precision,
    SizedDataset,
    TaskBound,
    TrainConfig,
)
from gradsync.feedback.options import FeedbackConfig
from gradsync.jobs.discovery import group_options
from gradsync.jobs.pairing import pairing_problem
from gradsync.launch.options import RunnerConfig
from gradsync.schedulers.registry import (
    SCHEDULERS,
    spec_of,
)
from gradsync.train.capacity import FORCE, capacity_problem, gpu_sharing_problem
from gradsync.train.checkpoint import resolve_checkpoint
from gradsync.train.checkpoint_manifest import checkpoint_problem
from gradsync.train.job_identity import job_identity
from gradsync.train.shape_check import input_problem


class ConfigError(ValueError):
    """Bad user input; the message is one line that says what to do."""


def expand_sweep(overrides: list[str]) -> list[list[str]]:
    """Every job's overrides for a -m command, in the order Hydra's basic sweeper numbers the
    jobs: the cartesian product of one axis per key, in the order the keys first appear (a key
    given again keeps its place and takes the later values), the last axis varying fastest."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        axes = {override.get_key_element(): _sweep_values(override) for override in parsed}
    except HydraException as exc:
        raise ConfigError(f"cannot parse overrides: {_first_line(str(exc))}") from None
    return [list(job) for job in itertools.product(*axes.values())]


def _sweep_values(override: Override) -> list[str]:
    """``key=value`` for each value an override takes, as Hydra writes them."""
    key = override.get_key_element()
    if not override.is_sweep_override():
        return [f"{key}={override.get_value_element_as_str()}"]
    if not override.is_discrete_sweep():  # interval(): values for an optimizer to choose
        raise ConfigError(
            f"{override.input_line}: an interval cannot be split into jobs; give the values "
            "(a,b,c), choice(...) or range(...)"
        )
    glob = override.value()
    if isinstance(glob, Glob):  # glob(top*): the group's options that match, sorted as Hydra does
        options = group_options().get(key)
        if options is None:
            raise ConfigError(f"{override.input_line}: glob() chooses options of a config group")
        return [f"{key}={option}" for option in glob.filter(options)]
    return [f"{key}={value}" for value in override.sweep_string_iterator()]


def defer_keys_of_swept_groups(overrides: list[str]) -> list[str]:
    """Rewrite ``group.key=v`` as the one-value sweep ``group.key=choice(v)`` when ``group`` is
    swept. Hydra composes a -m command once with each swept group at its default before
    splitting it into jobs, so ``-m compressor=topk,deft compressor.density=0.1`` would fail on
    ``compressor=none``, which has no density; a sweep value is applied only per job."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    swept_groups = {
        o.key_or_group for o in parsed if o.is_sweep_override() and "." not in o.key_or_group
    }
    rewritten = []
    for override, text in zip(parsed, overrides, strict=True):
        group, dot, _ = override.key_or_group.partition(".")
        plain = override.package is None and override.type == OverrideType.CHANGE
        if plain and dot and group in swept_groups and not override.is_sweep_override():
            key, value = text.split("=", 1)
            text = f"{key}=choice({value})"
        rewritten.append(text)
    return rewritten


def compose_jobs(
    overrides: list[str], *, multirun: bool, launcher_here: bool = True, machine: bool = True
) -> list[DictConfig]:
    """The composed config of every job, each checked; ConfigError on the first problem.
    ``launcher_here=False``: for a command that starts no workers (``gradsync plan``);
    ``machine=False``: for one that only shows the config (see ``check_config``)."""
    checked = _compose_and_check(
        overrides, multirun=multirun, launcher_here=launcher_here, machine=machine
    )
    for _, problem in checked:
        if problem is not None:
            raise problem
    return [cfg for cfg, _ in checked]


def check_sweep(
    overrides: list[str], *, launcher_here: bool = True
) -> list[tuple[DictConfig, ConfigError | None]]:
    """Each job's config and problem (None: fine) for a -m command, in job order.

    ConfigError is raised when a job cannot even be composed (an unknown option or key, a
    malformed value: a typo to fix before anything runs) and when no job is valid. Otherwise a
    job whose values fail the checks is left to fail on its own while the others run.
    ``launcher_here=False``: the jobs will be started elsewhere (see ``check_config``)."""
    checked = _compose_and_check(overrides, multirun=True, launcher_here=launcher_here)
    problems = [problem for _, problem in checked if problem is not None]
    if len(problems) == len(checked):
        raise problems[0]
    return checked


def compose_each(
    overrides: list[str], *, launcher_here: bool = True
) -> list[tuple[DictConfig, ConfigError | None]]:
    """Every job of a sweep composed (one Hydra initialization for all) and checked, with its
    problem (None: fine); ConfigError only when a job cannot be composed at all."""
    return _compose_and_check(overrides, multirun=True, launcher_here=launcher_here)


def compose_all(jobs: list[list[str]]) -> list[DictConfig]:
    """Each job's overrides composed (one Hydra initialization for all), unchecked;
    ConfigError on the first that cannot be."""
    families.register()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        return [_compose(job, multirun=False) for job in jobs]


def launcher_overrides(jobs: list[DictConfig]) -> list[str]:
    """What the runner of these (valid) jobs sets on Hydra's launcher for the whole sweep."""
    runners = [_typed_runner(cfg) for cfg in jobs]
    try:
        return type(runners[0]).launcher_overrides(runners)
    except ValueError as exc:
        raise ConfigError(_first_line(str(exc))) from None


def check_submission(jobs: list[DictConfig]) -> None:
    """ConfigError when the cluster's queue would refuse these (valid) jobs' resources."""
    runners = [_typed_runner(cfg) for cfg in jobs]
    try:
        problem = type(runners[0]).submission_problem(runners)
    except ValueError as exc:
        raise ConfigError(_first_line(str(exc))) from None
    if problem is not None:
        raise ConfigError(problem)


def _typed_runner(cfg: DictConfig) -> RunnerConfig:
    runner = OmegaConf.to_object(cfg.runner)
    assert isinstance(runner, RunnerConfig), "every runner option's schema is a RunnerConfig"
    return runner


def _compose_and_check(
    overrides: list[str], *, multirun: bool, launcher_here: bool = True, machine: bool = True
) -> list[tuple[DictConfig, ConfigError | None]]:
    families.register()
    jobs = expand_sweep(overrides) if multirun else [overrides]
    checked: list[tuple[DictConfig, ConfigError | None]] = []
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        for job in jobs:
            cfg = _compose(job, multirun=multirun)
            try:
                check_config(cfg, launcher_here=launcher_here, machine=machine)
                checked.append((cfg, None))
            except ConfigError as exc:
                checked.append((cfg, exc))
    return checked


def _compose(overrides: list[str], *, multirun: bool) -> DictConfig:
    given: list[Override] = []
    try:
        given = OverridesParser.create().parse_overrides(overrides)
        if not multirun:
            _refuse_sweeps(given)
        return compose(ROOT_CONFIG, overrides=overrides)
    except ConfigError:
        raise  # already one line (a ValueError, which the last clause would say again)
    except MissingConfigException as exc:
        raise ConfigError(_missing_option(exc)) from None
    except HydraException as exc:
        raise ConfigError(_composition_error(exc, given, overrides)) from None
    except OmegaConfBaseException as exc:
        raise ConfigError(_first_line(str(exc))) from None
    except (ArithmeticError, AttributeError, TypeError, ValueError) as exc:
        # A value OmegaConf fails on (10**400 for a float, {a: 1} for a section that is null)
        # keeps the exception's own type, and names its key only in the text; one that names
        # no key is a fault in gradsync, whose traceback stays.
        if "full_key: " not in str(exc):
            raise
        key = str(exc).partition("full_key: ")[2].partition("\n")[0].strip()
        typed = [o for o in given if key and key.startswith(str(o.key_or_group))]
        where = max(typed, key=lambda o: len(str(o.key_or_group))).input_line if typed else key
        cause = f"not a value this key takes ({_first_line(str(exc))})"
        raise ConfigError(f"{where}: {cause}" if where else cause) from None


def check_config(cfg: DictConfig, *, launcher_here: bool = True, machine: bool = True) -> None:
    """Range checks of the schemas, then checks against this machine, then whether the runner
    can start the job here. ``launcher_here=False`` leaves out the last (GPUs for the workers
    it starts, root for netem, sbatch for slurm, torchrun's environment, room for the
    processes), for configs meant for elsewhere; ``machine=False`` also the dataset's files and
    the checkpoint to resume and trying the model on its dataset's inputs
    (``shape_check.py``), for a command that only shows the config."""
    _check_known_keys(cfg, "")
    try:
        typed = OmegaConf.to_object(cfg)  # builds the schema dataclasses: runs __post_init__
    except (ValueError, OSError, ArithmeticError) as exc:  # a check, a rule's arithmetic
        raise ConfigError(_first_line(str(exc))) from None
    except OmegaConfBaseException as exc:
        raise ConfigError(_first_line(str(exc))) from None
    assert isinstance(typed, TrainConfig)
    _check_model_fits_dataset(typed)
    _check_compressor_fits_job(typed)
    _check_scheduler_capabilities(cfg, typed)
    _check_backend(typed)
    if not machine:
        return
    _check_resume(typed)
    _check_dataset(typed)
    _check_model_takes_inputs(cfg)
    if launcher_here:
        _check_device(cfg, typed)
        _check_runner(typed)
        _check_host_capacity(cfg, typed)  # it may size the model, which must fit its data
        # Last, as the sampler would meet it: every other problem of the job is said first.
        _check_batch_fits_dataset(typed)


def _check_scheduler_capabilities(cfg: DictConfig, typed: TrainConfig) -> None:
    """What the scheduler's registry entry says it cannot take: a device, a number of servers,
    resuming, fp16's loss scaling (what it takes of compressors: ``pairing.py``)."""
    spec = spec_of(typed.scheduler)
    able = spec.capabilities
    device = typed.trainer.device.value
    if device not in able.devices:
        raise ConfigError(
            f"scheduler={spec.name} runs on {' or '.join(able.devices)} only, not {device}; "
            f"use trainer.device={able.devices[0]}"
        )
    if able.servers is not None and typed.trainer.servers != able.servers:
        raise ConfigError(
            f"scheduler={spec.name} runs {_servers(able.servers)}, got "
            f"trainer.servers={typed.trainer.servers}"
        )
    if not able.resumable and typed.trainer.resume is not None:
        raise ConfigError(
            f"scheduler={spec.name} cannot resume: it does not checkpoint its servers' "
            "optimizer state; start a new run"
        )
    if typed.trainer.precision is Precision.fp16 and not able.loss_scaling:
        able_ones = [name for name, s in SCHEDULERS.items() if s.capabilities.loss_scaling]
        raise ConfigError(
            f"scheduler={spec.name} does not apply each step's gradient on every worker in that "
            "step, so fp16's loss scaling cannot skip an overflowing step; use "
            f"trainer.precision=bf16, or scheduler={'/'.join(able_ones)}"
        )


def _servers(count: int) -> str:
    return "one parameter server" if count == 1 else f"{count} parameter servers"


def _check_known_keys(node: DictConfig, path: str) -> None:
    """Keys added with ``+key=value`` that no schema defines would be silently ignored."""
    schema = OmegaConf.get_type(node)
    if schema is not None and dataclasses.is_dataclass(schema):
        fields = {f.name for f in dataclasses.fields(schema)}
        extra = [str(k) for k in node if str(k) not in fields]
        if extra:
            where = path or "the top level"
            valid = ", ".join(sorted(f for f in fields if not f.startswith("_")))
            raise ConfigError(
                f"unknown key '{_join(path, extra[0])}'; valid keys in {where}: {valid}"
            )
    for key in node:
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none():
            _check_known_keys(child, _join(path, str(key)))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check_runner(cfg: TrainConfig) -> None:
    problem = cfg.runner.machine_problem()
    if problem is not None:
        raise ConfigError(problem)


def _check_host_capacity(cfg: DictConfig, typed: TrainConfig) -> None:
    if not typed.runner.starts_processes_here:
        return

    problem = capacity_problem(cfg, typed.runner.workers)
    if problem is not None:
        raise ConfigError(
            f"trainer.workers={typed.trainer.workers}: {problem}; lower trainer.workers, run it "
            f"on a cluster (runner=slurm), or force it with {FORCE}"
        )


def _check_compressor_fits_job(typed: TrainConfig) -> None:
    """What the compressor's options declare they need of the optimizer, the feedback and the
    scheduler."""
    compressor = typed.compressor
    if not isinstance(compressor, CompressorConfig):
        return
    name = compressor_name(compressor)
    if compressor.applies_momentum and typed.trainer.nesterov:
        raise ConfigError(
            f"compressor={name} applies plain momentum itself (compressor.momentum), in place of "
            "the optimizer's: set trainer.nesterov=false"
        )
    feedback = typed.feedback
    if (
        compressor.keeps_own_residual
        and isinstance(feedback, FeedbackConfig)
        and feedback.always_keeps_residual
    ):
        raise ConfigError(
            f"compressor={name} accumulates what it does not send itself; an error-feedback "
            "residual would keep it twice: use feedback=auto (or none)"
        )
    problem = pairing_problem(spec_of(typed.scheduler), compressor, name)
    if problem is not None:
        raise ConfigError(problem)


def _backend_problem(cfg: TrainConfig, *, shares_gpus: bool) -> str | None:
    """Why the job's ``trainer.backend`` cannot carry it (``choose_backends``'s refusal)."""
    try:
        choose_backends(
            device=cfg.trainer.device.value,
            parameter_server=False,  # servers change the default group, never a refusal
            requested=cfg.trainer.backend.value,
            shares_gpus=shares_gpus,
            shaped_links=type(cfg.runner).shapes_links,
        )
    except BackendRefused as exc:
        return str(exc)
    return None


def _check_backend(cfg: TrainConfig) -> None:
    """NCCL only where the job's device and runner let it work (where workers share a GPU is
    known only where they start: ``_check_device``)."""
    problem = _backend_problem(cfg, shares_gpus=False)
    if problem is not None:
        raise ConfigError(problem)


def _check_device(job: DictConfig, cfg: TrainConfig) -> None:
    """GPUs for the workers this host starts, NCCL only if none is shared, and room in a GPU's
    memory for the workers that share it. Asked only where the workers start here: a host that
    submits the job to run elsewhere (a login node) is not held to it, and the workers check
    their own node when they start."""
    workers_here = cfg.runner.workers_starting_here(cfg.trainer.workers)
    if cfg.trainer.device is not Device.cuda or workers_here is None:
        return
    import torch  # only when CUDA is asked for

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    # Workers this host starts share what this process sees, also inside a Slurm allocation.
    problem = missing_gpu(gpus=visible, workers_here=workers_here, where="this machine")
    per_gpu = workers_per_gpu(gpus=visible, workers_here=workers_here)
    if problem is None and per_gpu > 1:
        problem = _backend_problem(cfg, shares_gpus=True)
    if problem is None and per_gpu > 1:
        memory = min(torch.cuda.get_device_properties(i).total_memory for i in range(visible))
        problem = gpu_sharing_problem(
            job, workers_per_gpu=per_gpu, gpu_bytes=memory, where="this machine"
        )
    if problem is not None:
        raise ConfigError(problem)


def _check_model_fits_dataset(cfg: TrainConfig) -> None:
    """The model is for the dataset's task."""
    model, dataset = cfg.model, cfg.dataset
    both = isinstance(model, TaskBound) and isinstance(dataset, TaskBound)
    if both and model.task_kind() != dataset.task_kind():
        raise ConfigError(
            f"the model is for {model.task_kind()} but the dataset is for "
            f"{dataset.task_kind()}; pick a matching model= / dataset= pair"
        )


def _check_model_takes_inputs(job: DictConfig) -> None:
    """The model takes a batch of the dataset's inputs, tried on the meta device
    (``shape_check.py``; it may import torch, so it comes after the checks that cost nothing,
    and not for a command that only shows the config)."""
    problem = input_problem(job)
    if problem is not None:
        raise ConfigError(problem)


def _check_batch_fits_dataset(cfg: TrainConfig) -> None:
    """One global batch from a training set whose size is known without loading it (the
    workers' sampler checks the others)."""
    if not isinstance(cfg.dataset, SizedDataset):
        return
    samples = cfg.dataset.train_samples()
    if samples is None:
        return
    t = cfg.trainer
    problem = too_few_samples(samples, batch_size=t.batch_size, workers=t.workers)
    if problem is not None:
        raise ConfigError(problem)


def _check_dataset(cfg: TrainConfig) -> None:
    if isinstance(cfg.dataset, FileDatasetConfig):
        message = cfg.dataset.missing_message()
        if message:
            raise ConfigError(message)


def _check_resume(cfg: TrainConfig) -> None:
    """The checkpoint to resume from: found, its files as written (checksums read once per
    resume), written by a job this one can continue (``job_identity.py``)."""
    if cfg.trainer.resume is None:
        return

    try:
        checkpoint = resolve_checkpoint(cfg.trainer.resume)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    problem = checkpoint_problem(checkpoint, job_identity(cfg))
    if problem is not None:
        raise ConfigError(problem)


# ---- turning Hydra's messages into one line --------------------------------------------------
def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "invalid configuration"


def _refuse_sweeps(given: list[Override]) -> None:
    """A value list (``a,b``) or sweep (``range(...)``) without -m: one line, before Hydra
    says it in several."""
    for override in given:
        if override.is_sweep_override():
            raise ConfigError(
                f"{override.input_line} lists several values: add -m to sweep over them, or "
                "quote it"
            )


def _missing_option(exc: MissingConfigException) -> str:
    """An option (or group) that does not exist, from the fields Hydra gives."""
    group, _, option = (exc.missing_cfg_file or "").rpartition("/")
    if group and exc.options:
        return f"unknown {group} '{option}'; valid options: {', '.join(exc.options)}"
    if group:
        return f"unknown config group '{group}'; see `gradsync run --help` for the groups"
    return _first_line(str(exc))


def _composition_error(exc: HydraException, given: list[Override], overrides: list[str]) -> str:
    """One line for what Hydra refused while composing, from the OmegaConf error behind it
    (its type and ``full_key``) and the overrides as parsed."""
    cause = exc.__cause__ or exc.__context__  # Hydra chains some, and raises others inside
    key = getattr(cause, "full_key", None)
    lines = {str(override.key_or_group): override.input_line for override in given}
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and key:
        recipe = [o.value() for o in given if o.key_or_group == KEYLESS_GROUP]
        if key in lines or not recipe:
            return _unknown_key(key, overrides)
        group = key.split(".")[0]
        return (
            f"{KEYLESS_GROUP}/{recipe[-1]} sets {key}, which the chosen {group} option does "
            f"not have; choose a {group} that has it (see `gradsync run --help`)"
        )
    if isinstance(cause, OmegaConfBaseException) and key:
        # The override the user typed: the key itself, or the one above an item of it.
        typed = [given_key for given_key in lines if key.startswith(given_key)]
        line = lines[max(typed, key=len)] if typed else key
        return f"{line}: {_first_line(str(cause))}"
    return _first_line(str(exc))


def _unknown_key(full_key: str, overrides: list[str]) -> str:
    parent_key, _, leaf = full_key.rpartition(".")
    # The structure comes from the group choices alone (other overrides may be bad too).
    rest = [o for o in overrides if "." not in o.split("=", 1)[0]]
    try:
        cfg = compose(ROOT_CONFIG, overrides=rest)
        node = OmegaConf.select(cfg, parent_key) if parent_key else cfg
    except (HydraException, OmegaConfBaseException):
        node = None
    if isinstance(node, DictConfig):
        keys = [str(k) for k in node if not str(k).startswith("_")]
        where = parent_key or "the top level"
        if keys:
            return f"unknown key '{full_key}'; valid keys in {where}: {', '.join(keys)}"
        return (
            f"unknown key '{full_key}': {where} has no settings to override; add one with "
            f"+{full_key}=VALUE"
        )
    if parent_key:
        return f"unknown key '{full_key}': '{parent_key}' is not a config section"
    return f"unknown key '{leaf}'"


def resolved_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)


def write_resolved(cfg: DictConfig, path: Path) -> None:
    """Write atomically: several tasks of one Slurm job write the same file, and a worker may
    read it at any moment."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(resolved_yaml(cfg), encoding="utf-8")
    os.replace(partial, path)
