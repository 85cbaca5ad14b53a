"""Options of ``scheduler=allreduce`` (it has none but its engine). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AllreduceConfig:
    _target_: str = "gradsync.schedulers.allreduce.allreduce.AllreduceSync"
    _partial_: bool = True
