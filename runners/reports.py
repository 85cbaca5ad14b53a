"""Which rank caused a failed job, from exit codes and the error reports workers leave.

Each worker writes ``error-rank<r>.json`` (rank, type, message, traceback, time) into the
directory named by ``GRADSYNC_ERROR_FILE`` when it fails. Once one rank dies its peers fail
too (closed connections), so the earliest report is the cause, unless a rank was killed by a
signal nobody sent on purpose.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from gradsync.launch import WorkerFailure


def error_file(directory: Path, rank: int) -> Path:
    return directory / f"error-rank{rank}.json"


def read_error_reports(directory: Path) -> list[dict[str, Any]]:
    reports = []
    for path in directory.glob("error-rank*.json"):
        try:
            reports.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError):
            continue  # half-written by a rank that was killed while writing
    return reports


def root_cause(exit_codes: dict[int, int], reports: list[dict[str, Any]]) -> WorkerFailure:
    """The failure to report, from {rank: exit code} of failed ranks and their reports."""
    signalled = {rank: code for rank, code in exit_codes.items() if code < 0}
    if signalled:
        rank, code = min(signalled.items())
        return WorkerFailure(rank=rank, reason=f"killed by {signal.Signals(-code).name}")
    if reports:
        first = min(reports, key=lambda r: r["time"])
        # A setting the job cannot run with carries no type: its message is the whole reason.
        reason = ": ".join(part for part in (first["type"], first["message"]) if part)
        return WorkerFailure(rank=first["rank"], reason=reason, detail=first["traceback"])
    rank, code = min(exit_codes.items())
    return WorkerFailure(rank=rank, reason=f"exited with code {code} and left no error report")
