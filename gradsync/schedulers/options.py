"""What every scheduler's options share: the engine they build (``_target_``, built partially:
the worker adds the compressor, error feedback and collective) and range checks declared on the
fields, run when the composed config becomes objects (``OmegaConf.to_object``), before any
worker starts. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from gradsync.config.schema import (
    require_at_least,
    require_choice,
    require_json_file,
    require_positive,
)


@dataclass(frozen=True)
class Check:
    at_least: float | None = None
    positive: bool = False
    choices: tuple[str, ...] = ()
    json_fields: tuple[str, ...] = ()
    """The keys a JSON file the option names must hold; ``json_what`` says what the file is."""
    json_what: str = ""


def option(default: Any, **check: Any) -> Any:
    """A field with ``default`` whose value (unless None) must pass ``Check(**check)``."""
    return field(default=default, metadata={"check": Check(**check)})


@dataclass
class SchedulerOptions:
    _target_: str = ""
    _partial_: bool = True

    def __post_init__(self) -> None:
        for spec in fields(self):
            check: Check | None = spec.metadata.get("check")
            value = getattr(self, spec.name)
            if check is None or value is None:
                continue
            key = f"scheduler.{spec.name}"
            if check.at_least is not None:
                require_at_least(key, value, check.at_least)
            if check.positive:
                require_positive(key, value)
            if check.choices:
                require_choice(key, value, check.choices)
            if check.json_fields:
                require_json_file(value, key, check.json_fields, check.json_what)
