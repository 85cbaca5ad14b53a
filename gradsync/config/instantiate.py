"""The one place where config nodes become objects, restricted to an allow-list of targets.

A config-controlled ``_target_`` can name any importable callable; only gradsync's own
components (and the launch package ``runners``) may be built from config.
"""

from __future__ import annotations

from typing import Any

from hydra.utils import get_method, instantiate
from omegaconf import DictConfig, ListConfig

ALLOWED_TARGET_PREFIXES = ("gradsync.", "runners.")


def _check_targets(node: Any, path: str) -> None:
    if isinstance(node, DictConfig):
        target = node.get("_target_")
        if target is not None and not str(target).startswith(ALLOWED_TARGET_PREFIXES):
            raise ValueError(
                f"{path}._target_={target} is not allowed: targets must start with "
                f"{' or '.join(ALLOWED_TARGET_PREFIXES)}"
            )
        for key in node:
            _check_targets(node[key], f"{path}.{key!s}")
    elif isinstance(node, ListConfig):
        for i, item in enumerate(node):
            _check_targets(item, f"{path}[{i}]")


def resolve(target: str, *, path: str) -> Any:
    """The function a config names by its dotted path (``path`` is the key, for errors)."""
    _check_targets(DictConfig({"_target_": target}), path.rpartition(".")[0] or path)
    return get_method(target)


def build(node: DictConfig, *, path: str, **runtime: Any) -> Any:
    """Instantiate ``node`` (its ``path`` is used in error messages) with runtime objects."""
    _check_targets(node, path)
    return instantiate(node, **runtime)
