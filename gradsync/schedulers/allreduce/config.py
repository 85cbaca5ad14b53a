"""Options of ``scheduler=allreduce`` (it has none but its engine). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from gradsync.schedulers.options import SchedulerOptions


@dataclass
class AllreduceConfig(SchedulerOptions):
    _target_: str = "gradsync.schedulers.allreduce.allreduce.AllreduceSync"
