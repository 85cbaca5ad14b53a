"""``summary.json``: the figures a run ended with, written by the launching process.

Final metrics come from ``metrics.jsonl`` (the last value of every metric, the best eval
accuracy, mean throughput after the first window), so a failed run is summarized from what it
logged before it stopped, the same way as a completed one.
"""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any, TypeGuard

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
JOBS_FILE = "jobs.txt"  # in a sweep's directory: the jobs a Slurm array lists
EXIT_CODES = {"completed": 0, "failed": 1, "interrupted": 130, "terminated": 143}
_PACKAGES = ("gradsync", "torch", "torchvision", "hydra-core", "omegaconf", "wandb")


def read_metrics_file(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The records of a ``metrics.jsonl`` file and the numbers (from 1) of the lines that are
    not a record as ``JsonlLogger`` writes one: the last line of a killed run may be cut short,
    and a damaged line (binary bytes, invalid UTF-8, NUL bytes) should not hide the ones after
    it. OSError if the file cannot be read."""
    if not path.is_file():
        return [], []
    records, bad_lines = [], []
    # Split on newlines only: the logger writes ASCII JSON, and damaged bytes may hold other
    # characters str.splitlines() would break at, so line numbers would no longer match.
    for number, line in enumerate(path.read_bytes().split(b"\n"), start=1):
        if not line.strip():
            continue
        record = _record(line)
        if record is None:
            bad_lines.append(number)
        else:
            records.append(record)
    return records, bad_lines


def _record(line: bytes) -> dict[str, Any] | None:
    """A logged record: a JSON object with an integer ``step`` and a finite number or null for
    every value (the logger writes null for NaN and infinity); None for anything else."""
    try:
        record = json.loads(line.decode("utf-8"), parse_constant=_no_constant)
    except (ValueError, RecursionError):  # bad UTF-8 or JSON, a 5000-digit number, [[[[...
        return None
    if not isinstance(record, dict) or not _is_int(record.get("step")):
        return None
    return record if all(v is None or _is_number(v) for v in record.values()) else None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a value gradsync writes")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63


def _is_number(value: object) -> TypeGuard[int | float]:
    """A finite int or float, as JSON gives one (bool is not one, nor an int too large for a
    float)."""
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


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
    """The run's summary, None if it has none; DamagedSummary (one line naming the file) if it
    is not a summary ``write_summary`` wrote: cut short, binary, or a field of the wrong type."""
    path = run_dir / SUMMARY_FILE
    if not path.is_file():
        return None
    try:
        summary = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad UTF-8 or JSON
        raise DamagedSummary(f"{path} is damaged ({exc}); remove it or the run directory") from None
    if not isinstance(summary, dict) or "status" not in summary:
        raise DamagedSummary(f"{path} is not a run summary (no status); remove it")
    problem = _summary_problem(summary)
    if problem is not None:
        raise DamagedSummary(f"{path} is damaged ({problem}); remove it or the run directory")
    return summary


def _is_str(value: object) -> bool:
    return isinstance(value, str)


def _is_str_list(value: object) -> bool:
    return isinstance(value, list) and all(map(_is_str, value))


def _is_metrics(value: object) -> bool:
    return isinstance(value, dict) and all(v is None or _is_number(v) for v in value.values())


_SUMMARY_FIELDS: dict[str, tuple[str, Callable[[object], bool]]] = {
    "status": (f"one of {', '.join(EXIT_CODES)}", lambda v: _is_str(v) and v in EXIT_CODES),
    "exit_code": ("an integer", _is_int),
    "error": ("a string or null", lambda v: v is None or _is_str(v)),
    "final": ("an object of finite numbers", _is_metrics),
    "overrides": ("a list of strings", _is_str_list),
    "command": ("a string", _is_str),
    "config_path": ("a string", _is_str),
    "run_dir": ("a string", _is_str),
    "wall_time_s": ("a finite number >= 0", lambda v: _is_number(v) and v >= 0),
    "host": ("a string", _is_str),
    "pid": ("an integer", _is_int),
}
"""What ``write_summary`` writes in each field; one not there is not checked (summaries of
older versions lack some), nor one it does not write."""


def _summary_problem(summary: dict[str, Any]) -> str | None:
    for key, (expected, valid) in _SUMMARY_FIELDS.items():
        if key in summary and not valid(summary[key]):
            return f"{key} is {_shown(summary[key])}, not {expected}"
    return None


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else f"{text[:37]}..."
