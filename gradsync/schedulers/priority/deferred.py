"""Updating parameters later than the step their gradient belongs to, with that step's optimizer
settings (the learning-rate scheduler has moved on since)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from torch import Tensor
from torch.optim import Optimizer


def hyperparameters(group: Mapping[str, Any]) -> dict[str, Any]:
    """A parameter group's settings now (a tensor learning rate copied, not shared)."""
    return {k: v.clone() if isinstance(v, Tensor) else v for k, v in group.items() if k != "params"}


@contextlib.contextmanager
def using(optimizer: Optimizer, hyper: Sequence[Mapping[str, Any]]) -> Iterator[None]:
    """The optimizer with the settings of an earlier step (the LR scheduler has moved on)."""
    groups = optimizer.param_groups
    now = [{k: group[k] for k in saved} for group, saved in zip(groups, hyper, strict=True)]
    for group, saved in zip(groups, hyper, strict=True):
        group.update(saved)
    try:
        yield
    finally:
        for group, current in zip(groups, now, strict=True):
            group.update(current)
