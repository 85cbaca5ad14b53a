"""``summary.csv`` for a sweep: one row per job (overrides, status, final metrics)."""

from __future__ import annotations

import csv
import logging
from pathlib import Path
from typing import Any, ClassVar

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from gradsync.metrics.summary import DamagedSummary, read_summary

SWEEP_FILE = "summary.csv"
log = logging.getLogger("gradsync")


def job_order(job_dir: Path) -> tuple[bool, int, str]:
    """Jobs in number order (2 before 10), anything not numbered after them."""
    numbered = job_dir.name.isdigit()
    return (not numbered, int(job_dir.name) if numbered else 0, job_dir.name)


def _job_dirs(sweep_dir: Path, expected_jobs: int) -> list[Path]:
    dirs = {p.parent.parent for p in sweep_dir.glob("*/.hydra/overrides.yaml")}
    dirs |= {sweep_dir / str(job) for job in range(expected_jobs)}
    return sorted(dirs, key=job_order)


def sweep_rows(sweep_dir: Path, *, expected_jobs: int = 0) -> list[dict[str, Any]]:
    """One row per job directory, and per job number below ``expected_jobs`` even if that job
    never started (status ``missing``)."""
    rows = []
    for job_dir in _job_dirs(sweep_dir, expected_jobs):
        try:
            summary = read_summary(job_dir) or {
                "status": "missing",
                "error": "no summary.json: the job was killed or never started",
            }
        except DamagedSummary as exc:
            summary = {"status": "damaged", "error": str(exc)}
        row: dict[str, Any] = {
            "job": job_dir.name,
            "overrides": " ".join(summary.get("overrides") or []),
            "status": summary["status"],
            "error": summary.get("error") or "",
        }
        row.update(summary.get("final") or {})
        row["run_dir"] = str(job_dir)
        rows.append(row)
    return rows


def write_sweep_summary(
    sweep_dir: Path, rows: list[dict[str, Any]] | None = None, *, expected_jobs: int = 0
) -> Path:
    """``summary.csv`` of ``rows`` (by default, ``sweep_rows`` of the directory)."""
    rows = sweep_rows(sweep_dir, expected_jobs=expected_jobs) if rows is None else rows
    fixed = ["job", "overrides", "status", "error"]
    metric_keys = sorted({k for row in rows for k in row} - {*fixed, "run_dir"})
    path = sweep_dir / SWEEP_FILE
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*fixed, *metric_keys, "run_dir"])
        writer.writeheader()
        writer.writerows(rows)
    return path


class SweepSummaryCallback(Callback):
    statuses: ClassVar[list[str]] = []
    """Every job's status in the last sweep this process launched, wherever its jobs ran (here
    or on a cluster): what the command's exit code is decided from."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        rows = sweep_rows(sweep_dir)
        path = write_sweep_summary(sweep_dir, rows)
        SweepSummaryCallback.statuses = [row["status"] for row in rows]
        log.info(f"sweep summary: {path}")
