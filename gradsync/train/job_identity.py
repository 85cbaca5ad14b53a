"""What a resumed job must share with the job that wrote its checkpoint, for the saved state to
fit: the job's identity, saved in the checkpoint's ``meta.json`` and compared by the launcher
before any worker starts (``checkpoint_manifest.checkpoint_problem``). Torch-free.

The identity is a flat mapping of settings (``model.hidden``, ``trainer.precision``; a group's
own key, ``model``, holds the ``_target_`` its option builds), read from the resolved config:

- the model, the scheduler, the compressor and the feedback: the option and every setting of
  it. Together they are the method a run measures, and they shape the saved state (weights,
  error-feedback residuals, a compressor's memory such as PowerSGD's Q, a scheduler's state);
- the dataset's option and its settings that shape the model's input and output (classes,
  image shape or size, vocabulary, kind): every setting but ``DATA_MAY_CHANGE``;
- ``trainer.workers`` (each worker's state is its own), ``trainer.servers``,
  ``trainer.precision`` (fp16 saves its loss scale) and ``trainer.optimizer`` (its state).

Everything else may change on resume: the run's length (``trainer.epochs``,
``trainer.max_steps``), the learning rate and its schedule, logging and evaluation, the
device, backend and runner, threads and timeouts, the seed, the batch size, where the data is
read from; and an option's settings that follow one of those by default (``compressor.seed``
is ``trainer.seed`` unless set). (The optimizer's saved state keeps its own learning rate and
momentum: torch's ``Optimizer.load_state_dict`` restores them.)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gradsync.families import option_classes, option_named

DATASET = "dataset"
GROUPS = ("model", DATASET, "scheduler", "compressor", "feedback")
"""Groups whose option is the job's identity, with every setting (the dataset: those that
shape the model)."""
DATA_MAY_CHANGE = frozenset(
    {
        "root", "download", "verify", "hub_name", "hub_config",  # where the files come from
        "augment", "eval_split", "seq_len",  # what a batch is cut into and shown as
        "num_samples", "num_test_samples", "pool_size", "test_fraction", "split_seed",
        "seed", "negatives", "eval_negatives",  # which samples, in which order
    }
)  # fmt: skip
"""Dataset settings that shape neither the model nor its saved state."""
TRAINER_KEYS = ("workers", "servers", "precision", "optimizer")
"""``trainer.*`` settings that are the job's identity."""
TARGET = "_target_"


def job_identity(config: Any) -> dict[str, Any]:
    """The identity of the job ``config`` describes: a composed config, its typed objects
    (``TrainConfig``), or the resolved YAML a worker loads; each gives the same mapping, with
    JSON's values (as ``meta.json`` keeps it)."""
    identity: dict[str, Any] = {}
    for group in GROUPS:
        settings = _plain(_child(config, group))
        identity[group] = settings.pop(TARGET, None)
        follows = _follows_trainer(group, identity[group])
        for key, value in _flat(settings, group):
            name = key.split(".")[1]
            if name not in follows and (group != DATASET or name not in DATA_MAY_CHANGE):
                identity[key] = value
    trainer = _plain(_child(config, "trainer"))
    for key in TRAINER_KEYS:
        identity[f"trainer.{key}"] = trainer.get(key)
    normalized: dict[str, Any] = json.loads(json.dumps(identity))
    return normalized


def _follows_trainer(group: str, target: Any) -> frozenset[str]:
    """Settings of the option building ``target`` whose default is a trainer setting
    (``compressor.seed`` is ``trainer.seed``, DGC's ``compressor.momentum`` is
    ``trainer.momentum``): they may change on resume as that setting may, so they are not the
    job's identity."""
    classes = [
        c for c in option_classes().get(group, {}).values() if getattr(c, TARGET, None) == target
    ]
    return frozenset(
        spec.name
        for cls in classes
        for spec in dataclasses.fields(cls)
        if isinstance(spec.default, str) and spec.default.startswith("${trainer.")
    )


def identity_difference(saved: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """The first setting of ``current`` the checkpoint's ``saved`` identity holds otherwise, as
    ``written with A, this job has B: resume with A``: the group's option when the two are
    different options (``model=cnn``), else the setting (``model.hidden=[128]``); None when
    none differs. A setting one of them does not record (a checkpoint from an older gradsync)
    is not compared."""
    for key, value in current.items():
        if key in saved and saved[key] != value:
            was, now = _described(key, saved, current)
            return f"was written with {was}, this job has {now}: resume with {was}"
    return None


def _described(key: str, saved: Mapping[str, Any], current: Mapping[str, Any]) -> tuple[str, str]:
    """``key``'s group as options, where they differ, else ``key`` as values (override syntax)."""
    group = key.split(".")[0]
    if group in GROUPS:
        was, now = _option_name(group, saved), _option_name(group, current)
        if was != now:
            return f"{group}={was}", f"{group}={now}"
    return f"{key}={_shown(saved[key])}", f"{key}={_shown(current[key])}"


def _child(config: Any, group: str) -> Any:
    if isinstance(config, Mapping):  # a DictConfig too
        return config.get(group)
    return getattr(config, group, None)


def _plain(node: Any) -> dict[str, Any]:
    """A group's settings as plain values, interpolations resolved, enums by name; keys that
    start with ``_`` other than ``_target_`` (``_partial_``) are how it is built, not what."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        node = OmegaConf.structured(node)
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node, resolve=True, enum_to_str=True)
    if not isinstance(node, Mapping):
        return {}
    return {str(k): v for k, v in node.items() if not str(k).startswith("_") or k == TARGET}


def _flat(settings: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    for key, value in settings.items():
        if isinstance(value, Mapping):
            yield from _flat(value, f"{prefix}.{key}")
        else:
            yield f"{prefix}.{key}", value


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ",".join(_shown(v) for v in value) + "]"
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return str(value)


def _option_name(group: str, identity: Mapping[str, Any]) -> str:
    """The ``group=`` option ``identity`` records (``families.option_named``)."""
    prefix = f"{group}."
    settings = {k[len(prefix) :]: v for k, v in identity.items() if k.startswith(prefix)}
    return option_named(group, identity.get(group), settings)
