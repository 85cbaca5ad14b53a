"""Finding runs under the paths a user gives and reading what each one logged.

A run directory is one that holds ``metrics.jsonl``, ``summary.json`` or ``.hydra/`` (a single
run, or one job of a local or Slurm sweep). Everything comes from those local files, so a run
logged to wandb as well reads the same.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from gradsync.metrics.summary import (
    JOBS_FILE,
    METRICS_FILE,
    SUMMARY_FILE,
    DamagedSummary,
    read_metrics_file,
    read_summary,
)
from gradsync.metrics.sweep_summary import job_order

INCOMPLETE = "incomplete"  # no summary.json yet: still running, or killed before writing one
NOT_STARTED = "not started"  # listed in a sweep's jobs.txt, no directory yet
_NOT_RUNS = {"wandb", "checkpoints", "report"}  # inside a run, or written by this command


class ReportError(Exception):
    """Bad input to ``gradsync report``; its message is the one line shown to the user."""


@dataclass
class Run:
    path: Path
    status: str
    error: str = ""
    overrides: list[str] = field(default_factory=list)
    choices: dict[str, str] = field(default_factory=dict)
    config: DictConfig | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: list[int] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.status == "completed"

    def setting(self, key: str) -> Any:
        """What the run was configured with: a group's chosen option (``compressor``) or a
        config value (``compressor.density``); None where the run has no such key."""
        if key in self.choices:
            return self.choices[key]
        if self.config is not None:
            try:
                value = OmegaConf.select(self.config, key, default=None)
            except OmegaConfBaseException:  # an interpolation that cannot resolve here
                value = None
            if value is not None:
                return OmegaConf.to_container(value) if isinstance(value, DictConfig) else value
        return override_values(self.overrides).get(key)

    def series(self, key: str, *, x: str = "step") -> tuple[list[float], list[float]]:
        """(x, value) of every record that has both, in logged order."""
        pairs = [(r[x], r[key]) for r in self.records if r.get(key) is not None and x in r]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def values(self, key: str) -> list[float]:
        return [r[key] for r in self.records if r.get(key) is not None]


def override_values(overrides: list[str]) -> dict[str, str]:
    """``key=value`` overrides as a mapping; ``+``/``~`` prefixes and ``@package`` dropped."""
    values = {}
    for text in overrides:
        key, sep, value = text.partition("=")
        if sep:
            values[key.lstrip("+~").split("@")[0]] = value
    return values


def continuous(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A resumed run appends to the same ``metrics.jsonl`` from its checkpoint on, with its
    clock restarted. Keep one history: the resumed records replace those the first attempt
    logged from the same step on, and their elapsed time continues where the kept ones end."""
    history: list[dict[str, Any]] = []
    offset = 0.0
    previous_elapsed = None
    last_step_of_kind: dict[frozenset[str], int] = {}
    for record in records:
        if _starts_an_attempt(record, previous_elapsed, last_step_of_kind):
            history = [r for r in history if r.get("step", 0) < record.get("step", 0)]
            last_step_of_kind = {}
            offset = next(
                (r["time/elapsed"] for r in reversed(history) if "time/elapsed" in r), 0.0
            )
        elapsed = record.get("time/elapsed")
        if elapsed is not None:
            previous_elapsed = elapsed
            record = {**record, "time/elapsed": elapsed + offset}
        if "step" in record:
            last_step_of_kind[frozenset(record)] = record["step"]
        history.append(record)
    return history


def _starts_an_attempt(
    record: dict[str, Any],
    previous_elapsed: float | None,
    last_step_of_kind: dict[frozenset[str], int],
) -> bool:
    """One attempt logs each kind of record (its set of keys) at rising steps on a rising
    clock. A restart shows as the clock going back, or, when the new process reached the
    step faster than the old one's clock read, as a kind of record logged again at a step
    it already had."""
    elapsed = record.get("time/elapsed")
    if previous_elapsed is not None and elapsed is not None and elapsed < previous_elapsed:
        return True
    step = record.get("step")
    last = last_step_of_kind.get(frozenset(record))
    return step is not None and last is not None and step <= last


def is_run_dir(path: Path) -> bool:
    return any((path / name).exists() for name in (METRICS_FILE, SUMMARY_FILE, ".hydra"))


def _run_dirs(root: Path) -> Iterator[Path]:
    if is_run_dir(root):
        yield root
        return
    children = [c for c in root.iterdir() if c.is_dir() and not c.name.startswith(".")]
    for child in sorted(children, key=job_order):
        if child.name not in _NOT_RUNS:
            yield from _run_dirs(child)


def _not_started(root: Path) -> list[Run]:
    """Jobs a ``gradsync sweep --list`` array lists (``jobs.txt``) with no directory yet."""
    listed = root / JOBS_FILE
    if not listed.is_file():
        return []
    lines = listed.read_text(encoding="utf-8").splitlines()
    return [
        Run(
            path=root / str(n),
            status=NOT_STARTED,
            error="listed in jobs.txt, not started yet",
            overrides=shlex.split(line),
        )
        for n, line in enumerate(lines)
        if not (root / str(n)).exists()
    ]


def _load_yaml(path: Path) -> Any:
    try:
        return OmegaConf.load(path) if path.is_file() else None
    except (OmegaConfBaseException, OSError, ValueError):
        return None


def load_run(path: Path) -> Run:
    records, bad_lines = read_metrics_file(path / METRICS_FILE)
    try:
        summary = read_summary(path)
    except DamagedSummary as exc:
        raise ReportError(str(exc)) from None
    hydra = _load_yaml(path / ".hydra" / "hydra.yaml")
    overrides = _load_yaml(path / ".hydra" / "overrides.yaml")
    choices = OmegaConf.select(hydra, "hydra.runtime.choices") if hydra is not None else None
    config = _load_yaml(path / "config.yaml") or _load_yaml(path / ".hydra" / "config.yaml")
    if summary is not None:
        status, error = summary.get("status", "unknown"), summary.get("error") or ""
    else:
        status, error = INCOMPLETE, "no summary.json: still running, or stopped before the end"
    return Run(
        path=path,
        status=status,
        error=error,
        overrides=[str(o) for o in overrides]
        if overrides is not None
        else (list(summary.get("overrides", [])) if summary else []),
        choices={str(k): str(v) for k, v in (choices or {}).items() if v is not None},
        config=config if isinstance(config, DictConfig) else None,
        records=continuous(records),
        bad_lines=bad_lines,
    )


def find_runs(paths: list[Path]) -> list[Run]:
    """Every run under ``paths`` (each a run directory or any directory above some), in the
    order given, sweep jobs in number order. ReportError if a path is missing or holds none."""
    runs: dict[str, Run] = {}
    for path in paths:
        if not path.is_dir():
            raise ReportError(f"{path} is not a directory; give run or sweep directories")
        dirs = list(_run_dirs(path))
        found = [load_run(d) for d in dirs]
        # Sweeps inside what was asked for: one run of a sweep does not bring its siblings.
        for sweep in sorted({d.parent for d in dirs if d != path} | {path}):
            found += _not_started(sweep)
        if not found:
            raise ReportError(
                f"no runs under {path}: a run directory holds metrics.jsonl or summary.json"
            )
        for run in sorted(found, key=lambda run: _path_order(run.path)):
            runs.setdefault(os.path.realpath(run.path), run)
    return list(runs.values())


def _path_order(path: Path) -> tuple[tuple[bool, int, str], ...]:
    return tuple(job_order(Path(part)) for part in path.parts)
