"""What every scheduler's options share: the engine they build (``_target_``, built partially:
the worker adds the compressor, error feedback and collective); their checks are declared on
the fields (``option``) and run when the composed config becomes objects. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gradsync.config.checks import Options


@dataclass
class SchedulerOptions(Options):
    GROUP: ClassVar[str] = "scheduler"
    _target_: str = ""
    _partial_: bool = True
