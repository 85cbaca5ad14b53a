"""Whether a job's model takes its dataset's inputs, told while the job is composed.

A model given inputs it cannot take (a CNN's max-pool on a 1×1 image, a GPT-2 given more tokens
than it has positions, batch normalization over one value) fails in every worker, as a page of
tracebacks, once the processes have started. Composing the job instead builds its model on the
meta device for the dataset's shapes, where they are known before the data is read, and runs the
task's loss on one batch of ``trainer.batch_size`` (``capacity.measure_model``: shapes only,
nothing allocated or computed). What the model raises there is one line that names the settings.

Cheap on purpose: a model × dataset × batch sized before (capacity's cache of model sizes, which
a successful check fills for the capacity check that follows) is known to take its inputs, with
nothing imported; this process remembers every other answer. Only a shape error refuses: where
the meta device cannot tell (an op without a meta kernel, a value read on the host) or the model
fails for another reason (its worker will say which), the job composes as before.
"""

from __future__ import annotations

import re
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gradsync.families import option_named
from gradsync.train import capacity

SHAPE_ERRORS = (RuntimeError, ValueError, IndexError)
"""What torch's shape checks and the models' own raise for inputs they cannot take."""
_META_LIMIT = re.compile(r"\bmeta\b", re.IGNORECASE)
"""How torch words what the meta device cannot do ("Tensor.item() cannot be called on meta
tensors"): a job that needs it cannot be judged here, not a job at fault."""

_TOLD: dict[str, str | None] = {}
"""Each model × dataset × batch this process tried that raised: its refusal, or None (what it
raised says nothing of its inputs). One that took its batch is in capacity's cache instead."""


def input_problem(cfg: DictConfig) -> str | None:
    """Why the job's model cannot take one training batch of its dataset (one line), or None:
    it can, or that is not known before the data is read or cannot be told on the meta device."""
    if capacity.sized_before(cfg):
        return None  # it took such a batch, or its shapes are known only from its data
    key = capacity.size_key(cfg)
    if key not in _TOLD:
        try:
            size = capacity.measure_model(cfg)
        except Exception as exc:
            _TOLD[key] = _problem(cfg, exc)
        else:
            capacity.remember_size(cfg, size)  # None too: the next job knows it without torch
            return None
    return _TOLD[key]


def _problem(cfg: DictConfig, raised: Exception) -> str | None:
    """The refusal for what the model raised on the meta device; None for an op without a
    meta kernel, a value read on the host, or a fault in its code (its worker will say it)."""
    if isinstance(raised, NotImplementedError) or not isinstance(raised, SHAPE_ERRORS):
        return None
    return None if _META_LIMIT.search(str(raised)) else _refusal(cfg, raised)


def _refusal(cfg: DictConfig, cause: Exception) -> str:
    """The line that names the model, the dataset, its inputs' shape, the batch and the cause."""
    shape = _input_shape(cfg)
    settings = [
        f"dataset.{key}"
        for key, value in _values(cfg.dataset).items()
        if isinstance(value, list) and value == shape
    ]
    todo = (
        f"change {' or '.join(settings)}, or choose another model"
        if settings
        else "choose another model or dataset"
    )
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    return (
        f"model={_option_name(cfg.model, 'model')} cannot take "
        f"dataset={_option_name(cfg.dataset, 'dataset')}'s inputs of shape {shape} at "
        f"trainer.batch_size={cfg.trainer.batch_size}: "
        f"{lines[0] if lines else type(cause).__name__}; {todo}"
    )


def _input_shape(cfg: DictConfig) -> list[int]:
    """One sample's input shape, as the task's example batch has it (torch is imported: the
    model was just tried)."""
    # Deferred for start-up: only a refused job, whose model was just tried, pays for these.
    import torch

    from gradsync.tasks import build_task

    spec = capacity.known_spec(cfg)
    assert spec is not None, "only a dataset of known shapes had its model tried"
    with torch.device("meta"):
        inputs = build_task(spec).example_batch(1)[0]
    return list(inputs.shape[1:])


def _option_name(node: DictConfig, group: str) -> str:
    """The ``group=`` option ``node`` was composed from (``families.option_named``)."""
    return option_named(group, node.get("_target_"), _values(node))


def _values(node: Any) -> dict[str, Any]:
    values = OmegaConf.to_container(node, resolve=True)
    assert isinstance(values, dict)
    return {str(key): value for key, value in values.items()}
