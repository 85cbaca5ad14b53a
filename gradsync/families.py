"""Every family's options, given to Hydra: the one place that knows every family's registry.

Each family declares its options beside its code (``gradsync/compressors/registry.py``,
``gradsync/schedulers/registry.py``, ``gradsync/models/registry.py``,
``gradsync/data/registry.py``, ``gradsync/feedback/options.py``,
``gradsync/metrics/logger_options.py``, ``gradsync/launch/options.py``); the command line
registers them all here (``register``) before it composes anything, with the resolvers the
configs' interpolations use. ``config/`` knows none of them. Torch-free.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from gradsync.cluster.backends import AUTO, Backends, choose_backends
from gradsync.cluster.run_name import torchrun_run_name
from gradsync.compressors.registry import COMPRESSORS
from gradsync.config.files import ROOT_CONFIG_FILE
from gradsync.config.schema import Device, TrainConfig, TrainerConfig
from gradsync.data import loader_workers
from gradsync.data.registry import DATASETS
from gradsync.feedback.options import FEEDBACK
from gradsync.launch.options import RUNNERS, RunnerConfig
from gradsync.launch.slurm_launcher import store_launcher
from gradsync.metrics.logger_options import LOGGERS
from gradsync.models.registry import MODELS
from gradsync.schedulers.registry import SCHEDULERS, runs_servers


def option_classes() -> dict[str, dict[str, type]]:
    """``{group: {option: options class}}`` of every config group, read from the registries
    as they are now."""
    return {
        "model": dict(MODELS),
        "dataset": dict(DATASETS),
        "compressor": dict(COMPRESSORS),
        "feedback": dict(FEEDBACK),
        "scheduler": {name: spec.config for name, spec in SCHEDULERS.items()},
        "trainer": {"default": TrainerConfig},
        "runner": dict(RUNNERS),
        "logger": dict(LOGGERS),
    }


def option_named(group: str, target: Any, settings: Mapping[str, Any]) -> str:
    """The ``group=`` option that builds ``target`` with ``settings``: the one whose class
    builds it, or, where several do (resnet18, resnet50 and resnet101), the one whose defaults
    (its class's, then its YAML file's) have what ``settings`` has where theirs differ
    (``depth``); their names joined by ``/`` when that does not tell them apart, the target
    itself when no option builds it (any more)."""
    options = option_classes().get(group, {})
    names = [name for name, cls in options.items() if getattr(cls, "_target_", None) == target]
    if len(names) < 2:
        return names[0] if names else str(target)
    defaults = {name: _option_defaults(group, name, options[name]) for name in names}
    telling = [k for k in settings if len({json.dumps(d.get(k)) for d in defaults.values()}) > 1]
    alike = [n for n in names if all(defaults[n].get(k) == settings[k] for k in telling)]
    return "/".join(alike if len(alike) == 1 else names)


def _option_defaults(group: str, name: str, schema: type) -> dict[str, Any]:
    """An option's values before any override: its class's defaults, then its file's."""
    node = OmegaConf.structured(schema)
    path = ROOT_CONFIG_FILE.parent / group / f"{name}.yaml"
    if path.is_file():
        own = OmegaConf.load(path)
        assert isinstance(own, DictConfig), "an option's YAML file is a mapping"
        own.pop("defaults", None)
        node = OmegaConf.merge(node, own)
    plain = OmegaConf.to_container(node, resolve=False, enum_to_str=True)
    assert isinstance(plain, dict), "an option's schema is a mapping"
    return {str(k): v for k, v in plain.items()}


def register() -> None:
    """Store every option's class in Hydra's ConfigStore, and the resolvers configs use."""
    # Tasks per node of a multi-node job: ${gradsync.per_node:${trainer.workers},${runner.nodes}}
    OmegaConf.register_new_resolver("gradsync.per_node", _per_node, replace=True)
    OmegaConf.register_new_resolver("gradsync.cpus_per_task", _cpus_per_task, replace=True)
    OmegaConf.register_new_resolver("gradsync.gpus_per_node", _gpus_per_node, replace=True)
    OmegaConf.register_new_resolver("gradsync.parameter_server", _parameter_server, replace=True)
    OmegaConf.register_new_resolver("gradsync.processes", _processes, replace=True)
    OmegaConf.register_new_resolver("gradsync.colocated", _colocated, replace=True)
    # The run directory every process of a torchrun job agrees on (runner/torchrun.yaml).
    OmegaConf.register_new_resolver("gradsync.torchrun_run", torchrun_run_name, replace=True)
    store = ConfigStore.instance()
    store.store(name="schema_train", node=TrainConfig)
    store_launcher()
    for group, options in option_classes().items():
        # A group with YAML files (conf/<group>/) starts each from /schema/<group>/<option>;
        # the others' options are their classes alone.
        has_files = (ROOT_CONFIG_FILE.parent / group).is_dir()
        stored_as = f"schema/{group}" if has_files else group
        for name, node in options.items():
            store.store(group=stored_as, name=name, node=node)


def option_schema(node: Any, group: str) -> type | None:
    """The schema of ``group``'s option in a config: the node's own type when it was composed
    (structured); for one read back from a run's resolved YAML (plain), the option of
    ``group`` whose schema builds the same ``_target_``. None when neither says."""
    if not isinstance(node, DictConfig):
        return None
    kind = OmegaConf.get_type(node)
    if kind is not None and is_dataclass(kind):
        return kind
    built = _building(node, group)
    return built[0] if len(built) == 1 else None


def _building(node: DictConfig, group: str) -> list[type]:
    """The distinct option classes of ``group`` that build ``node``'s ``_target_``."""
    target = node.get("_target_")
    built = [
        schema
        for schema in option_classes().get(group, {}).values()
        if target is not None and getattr(schema, "_target_", None) == target
    ]
    return list(dict.fromkeys(built))


def runner_schema(cfg: Any) -> type[RunnerConfig]:
    """The schema of ``cfg``'s runner (a ``RunnerConfig``: its class-level declarations, such
    as ``starts_processes_here``), composed or read back from a run; the base ``RunnerConfig``
    (which declares nothing) when the config has no runner that a schema builds."""
    schema = option_schema(OmegaConf.select(cfg, "runner"), "runner")
    return schema if schema is not None and issubclass(schema, RunnerConfig) else RunnerConfig


def streamed_from_disk(dataset: Any) -> bool:
    """Whether a config's dataset is read from disk per batch by loader processes (its schema's
    ``streamed_from_disk``); datasets without the declaration are held in memory."""
    return bool(getattr(option_schema(dataset, "dataset"), "streamed_from_disk", False))


def _per_node(workers: int, nodes: int) -> int:
    return int(workers) // int(nodes)


def _cpus_per_task(threads: int, loaders: str, *, _root_: Any) -> int:
    """Compute threads plus loader processes: a number as given; under auto, what
    ``loader_workers.slurm_loader_cores`` asks for the job's dataset."""
    streamed = streamed_from_disk(_root_.get("dataset"))
    return int(threads) + loader_workers.slurm_loader_cores(loaders, streamed=streamed)


def _gpus_per_node(
    device: Any, workers: int, processes: int, nodes: int, gres: str | None
) -> int | None:
    """One GPU for each worker of the fullest node (a node's tasks are a block of ranks;
    parameter servers, the last ranks, take none); None on CPU or when ``gres`` asks for
    GPUs."""
    if getattr(device, "value", device) != Device.cuda.value or "gpu" in (gres or ""):
        return None
    return min(int(workers), int(processes) // int(nodes))


def _parameter_server(*, _root_: Any) -> bool:
    """Whether the job's scheduler runs servers besides the workers (its registry entry says;
    False while no scheduler is chosen). Also for a config read back from YAML."""
    scheduler = _root_.get("scheduler")
    return scheduler is not None and runs_servers(scheduler)


def _processes(workers: int, servers: int, parameter_server: bool) -> int:
    return int(workers) + (int(servers) if parameter_server else 0)


def _colocated(servers: int, colocate: bool, parameter_server: bool) -> int:
    return int(servers) if parameter_server and colocate else 0


def _option_name(value: Any) -> str:
    """An option's name, from a typed config (an Enum) or from the YAML a worker loads."""
    return value.value if isinstance(value, Enum) else str(value)


def job_backends(cfg: DictConfig, *, shares_gpus: bool = False) -> Backends:
    """The same answer on every rank (``shares_gpus``: whether any node of the job has more
    workers than GPUs, agreed by every rank), servers included, whatever device they use."""
    return choose_backends(
        device=_option_name(cfg.trainer.device),
        parameter_server=runs_servers(cfg.scheduler),
        requested=_option_name(cfg.trainer.get("backend", AUTO)),
        shares_gpus=shares_gpus,
        shaped_links=runner_schema(cfg).shapes_links,
    )


def typed_options(node: DictConfig, group: str) -> Any:
    """``group``'s options in a config as their typed class (checked), also for a config read
    back from a run's resolved YAML: the class of the option that builds its ``_target_``, or,
    where several do (asp and ssp), the nearest class they share that has every key."""
    schema = option_schema(node, group) or _shared_schema(node, _building(node, group))
    if schema is None:
        raise ValueError(f"no {group} option builds {node.get('_target_')!r}")
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), node))


def _shared_schema(node: DictConfig, candidates: list[type]) -> type | None:
    """The nearest class every one of ``candidates`` extends that has every key of ``node``."""
    keys = {str(key) for key in node}
    for base in candidates[0].__mro__ if candidates else ():
        if (
            is_dataclass(base)
            and all(issubclass(schema, base) for schema in candidates)
            and keys <= {spec.name for spec in fields(base)}
        ):
            return base
    return None
