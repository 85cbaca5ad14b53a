"""gradsync against the plain PyTorch limits: a bare training loop, and the same loop under DDP
on a one-rank process group, measured side by side in this process with gradsync's model,
optimizer and precision and the batch resident on the device; beside them a real
``gradsync run`` of the same job (data, loop, logging: the whole path).

Goals: the run at least 0.95 of the bare loop's samples/s, and its ``time/data`` at most 2% of
the iteration."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from omegaconf import DictConfig
from torch.nn.parallel import DistributedDataParallel

from benchmarks.gpu_jobs import Sizes, Workload, compose_job, on_device, release, resident_training
from benchmarks.gpu_runs import PARTS, RunResult, RunSizes, measured_run
from benchmarks.gpu_tables import GOAL_HEADER, Goal, goal_cells, markdown_table, number
from benchmarks.measure import alternating_medians

SPEED_GOAL = Goal(0.95)
"""gradsync run's samples/s ÷ the bare loop's."""
DATA_GOAL = Goal(0.02, at_most=True, percent=True)
"""The run's ``time/data`` ÷ its iteration."""


@dataclass(frozen=True)
class LimitRow:
    workload: str
    precision: str
    bare: float
    """Samples/s of the bare loop."""
    ddp: float
    """Samples/s of the loop under DDP."""
    run: RunResult

    @property
    def ratio(self) -> float | None:
        """The run's samples/s ÷ the bare loop's."""
        steady = self.run.steady
        return None if steady is None else steady.samples_per_s / self.bare

    @property
    def data_share(self) -> float | None:
        steady = self.run.steady
        return None if steady is None else steady.share("data")


def plain_speeds(cfg: DictConfig, device: torch.device, sizes: Sizes) -> tuple[float, float]:
    """Samples/s of the job's bare loop and of the same loop under DDP, side by side."""
    bare = resident_training(cfg, device)
    wrapped = resident_training(cfg, device)
    ddp = DistributedDataParallel(
        wrapped.model, device_ids=[device] if device.type == "cuda" else None
    )
    seconds = alternating_medians(
        {"bare": bare.step, "ddp": partial(wrapped.step, ddp)},
        warmup=sizes.warmup,
        rounds=sizes.rounds,
        block=sizes.steps,
        device=device,
    )
    batch = cfg.trainer.batch_size
    return batch / seconds["bare"], batch / seconds["ddp"]


def limit_rows(
    workloads: Sequence[Workload],
    precisions: Sequence[str],
    device: torch.device,
    sizes: Sizes,
    run_sizes: RunSizes,
    runs: Path,
) -> list[LimitRow]:
    """Each workload at each precision: its plain limits, then its ``gradsync run`` (in a
    directory under ``runs``). Needs a one-rank default process group (DDP's)."""
    rows = []
    for workload in workloads:
        for precision in precisions:
            job = [*workload.overrides, f"trainer.precision={precision}", *on_device(device)]
            bare, ddp = plain_speeds(compose_job(job), device, sizes)
            release(device)  # the run's worker gets the whole device
            run = measured_run(job, run_sizes, runs / f"{workload.name}-{precision}")
            rows.append(LimitRow(workload.name, precision, bare, ddp, run))
    return rows


def limits_table(rows: Sequence[LimitRow]) -> str:
    header = [
        "model",
        "precision",
        "bare loop samples/s",
        "DDP samples/s",
        "gradsync run samples/s",
        "gradsync ÷ bare",
        *GOAL_HEADER,
        "time/data share",
        *GOAL_HEADER,
        f"ms: {' / '.join(PARTS)}",
    ]
    lines = []
    for row in rows:
        steady = row.run.steady
        split = (
            row.run.error or ""
            if steady is None
            else " / ".join(number(steady.seconds.get(part, 0.0) * 1e3, 1) for part in PARTS)
        )
        lines.append(
            [
                row.workload,
                row.precision,
                number(row.bare, 0),
                number(row.ddp, 0),
                number(None if steady is None else steady.samples_per_s, 0),
                *goal_cells(SPEED_GOAL, row.ratio),
                *goal_cells(DATA_GOAL, row.data_share),
                split,
            ]
        )
    return markdown_table(header, lines, text_columns=2)
