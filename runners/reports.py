"""Which rank caused a failed job, from exit codes and the error reports workers leave.

Each worker writes ``error-rank<r>.json`` (rank, type, message, traceback, time) into the
directory named by ``GRADSYNC_ERROR_FILE`` when it fails. Once one rank dies its peers fail
too: they report a lost peer (``PeerLost``), never the cause while another report names one.
Otherwise the earliest report is the cause, unless a rank was killed by a signal nobody sent on
purpose. A stop signal (SIGINT, SIGTERM) is not a failure: the worker it reached leaves quietly
with 128 + the signal, and its job is stopped (``stopped_rank``).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from gradsync.launch import PeerLost, WorkerFailure
from gradsync.stop_signals import HANDLED


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
    killed = {rank: code for rank, code in exit_codes.items() if _killed_by(code) is not None}
    if killed:
        rank, code = min(killed.items())
        return WorkerFailure(rank=rank, reason=f"killed by {signal.Signals(-code).name}")
    if reports:
        # A lost peer is another rank's end: the cause only when no rank said more.
        first = min(reports, key=lambda r: (r["type"] == PeerLost.__name__, r["time"]))
        # A setting the job cannot run with carries no type: its message is the whole reason.
        reason = ": ".join(part for part in (first["type"], first["message"]) if part)
        return WorkerFailure(rank=first["rank"], reason=reason, detail=first["traceback"])
    rank, code = min(exit_codes.items())
    stop = _stop_signal(code)
    if stop is not None:
        return WorkerFailure(rank=rank, reason=f"stopped by {signal.Signals(stop).name}")
    return WorkerFailure(rank=rank, reason=f"exited with code {code} and left no error report")


def stopped_rank(exit_codes: dict[int, int]) -> tuple[int, int] | None:
    """(rank, signal) of a worker that a stop signal reached (SIGINT or SIGTERM sent to it, not
    by the launcher, which sends its own only once it stopped looking at exit codes), from
    {rank: exit code} of the ranks that ended; None when none did or a rank was killed (a
    death, which ``root_cause`` reports)."""
    if any(_killed_by(code) is not None for code in exit_codes.values()):
        return None
    signals = {rank: _stop_signal(code) for rank, code in exit_codes.items()}
    stopped = [(rank, signum) for rank, signum in sorted(signals.items()) if signum is not None]
    return stopped[0] if stopped else None


def _stop_signal(code: int) -> int | None:
    """The stop signal that ended a worker with exit ``code``: handled (128 + it), or before
    the worker set its handler (-it)."""
    for signum in HANDLED:
        if code in (128 + signum, -signum):
            return int(signum)
    return None


def _killed_by(code: int) -> int | None:
    """The signal other than a stop signal that killed a worker with exit ``code``, or None."""
    return -code if code < 0 and _stop_signal(code) is None else None
