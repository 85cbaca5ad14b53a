"""``summary.json``: the figures a run ended with, written by the launching process.

Final metrics come from ``metrics.jsonl`` (the last value of every metric, the best eval
accuracy, mean throughput after the first window), so a failed run is summarized from what it
logged before it stopped, the same way as a completed one.
"""

from __future__ import annotations

import json
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
JOBS_FILE = "jobs.txt"  # in a sweep's directory: the jobs a Slurm array lists
EXIT_CODES = {"completed": 0, "failed": 1, "interrupted": 130, "terminated": 143}
_PACKAGES = ("gradsync", "torch", "torchvision", "hydra-core", "omegaconf", "wandb")


def read_metrics_file(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The records of a ``metrics.jsonl`` file and the numbers (from 1) of the lines that are
    not a JSON object: the last line of a killed run may be cut short, and a damaged line should
    not hide the ones after it."""
    if not path.is_file():
        return [], []
    records, bad_lines = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        else:
            bad_lines.append(number)
    return records, bad_lines


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    return read_metrics_file(run_dir / METRICS_FILE)[0]


def steady_mean(values: list[float]) -> float | None:
    """Mean over the log windows after the first, whose timings include start-up (first-touch
    allocations, lazy init); the only window if there is one."""
    steady = values[1:] or values
    return sum(steady) / len(steady) if steady else None


def final_metrics(records: list[dict[str, Any]]) -> dict[str, Any]:
    final: dict[str, Any] = {}
    for record in records:
        final.update({k: v for k, v in record.items() if v is not None})
    accuracies = [r["eval/accuracy"] for r in records if r.get("eval/accuracy") is not None]
    if accuracies:
        final["eval/best_accuracy"] = max(accuracies)
    rates = [r["perf/samples_per_s"] for r in records if r.get("perf/samples_per_s")]
    if rates:
        final["perf/samples_per_s_mean"] = steady_mean(rates)
    return final


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def write_summary(
    run_dir: Path,
    *,
    status: str,
    command: str,
    overrides: list[str],
    config_path: Path,
    started: float,
    ended: float,
    error: str | None = None,
) -> dict[str, Any]:
    summary = {
        "status": status,
        "exit_code": EXIT_CODES[status],
        "error": error,
        "final": final_metrics(read_metrics(run_dir)),
        "overrides": overrides,
        "command": command,
        "config_path": str(config_path),
        "run_dir": str(run_dir),
        "wall_time_s": round(ended - started, 3),
        "versions": package_versions(),
        "host": platform.node(),
        "pid": os.getpid(),
    }
    tmp = run_dir / f".{SUMMARY_FILE}.tmp"
    tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, run_dir / SUMMARY_FILE)
    return summary


class DamagedSummary(ValueError):
    """A summary.json that is not one gradsync wrote (cut short, edited, another file)."""


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / SUMMARY_FILE
    if not path.is_file():
        return None
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DamagedSummary(f"{path} is damaged ({exc}); remove it or the run directory") from None
    if not isinstance(summary, dict) or "status" not in summary:
        raise DamagedSummary(f"{path} is not a run summary (no status); remove it")
    return summary
