"""``summary.csv`` for a sweep: one row per job (overrides, status, final metrics)."""

from __future__ import annotations

import csv
import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from gradsync.metrics.summary import read_summary

SWEEP_FILE = "summary.csv"
log = logging.getLogger("gradsync")


def _job_order(job_dir: Path) -> tuple[bool, int, str]:
    """Jobs in number order (2 before 10), anything not numbered after them."""
    numbered = job_dir.name.isdigit()
    return (not numbered, int(job_dir.name) if numbered else 0, job_dir.name)


def _job_dirs(sweep_dir: Path) -> list[Path]:
    dirs = [p.parent.parent for p in sweep_dir.glob("*/.hydra/overrides.yaml")]
    return sorted(dirs, key=_job_order)


def sweep_rows(sweep_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for job_dir in _job_dirs(sweep_dir):
        summary = read_summary(job_dir) or {"status": "missing", "overrides": [], "final": {}}
        row: dict[str, Any] = {
            "job": job_dir.name,
            "overrides": " ".join(summary.get("overrides", [])),
            "status": summary["status"],
            "error": summary.get("error") or "",
        }
        row.update(summary.get("final", {}))
        row["run_dir"] = str(job_dir)
        rows.append(row)
    return rows


def write_sweep_summary(sweep_dir: Path) -> Path:
    rows = sweep_rows(sweep_dir)
    fixed = ["job", "overrides", "status", "error"]
    metric_keys = sorted({k for row in rows for k in row} - {*fixed, "run_dir"})
    path = sweep_dir / SWEEP_FILE
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*fixed, *metric_keys, "run_dir"])
        writer.writeheader()
        writer.writerows(rows)
    return path


class SweepSummaryCallback(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        path = write_sweep_summary(Path(config.hydra.sweep.dir))
        log.info(f"sweep summary: {path}")
