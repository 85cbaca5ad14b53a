"""Small data files in each dataset's real on-disk format, for loading through the real loaders.

Every module in this package defines ``GENERATORS = {dataset_option: fn}`` where
``fn(root: Path) -> list[str]`` writes files under ``root`` and returns the overrides that point
the dataset at them (at least ``dataset.root=...``). Datasets that need no files (digits,
synthetic) have no generator.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path

Generator = Callable[[Path], list[str]]


def generators() -> dict[str, Generator]:
    found: dict[str, Generator] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        found.update(getattr(module, "GENERATORS", {}))
    return found
