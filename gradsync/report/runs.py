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

from omegaconf import DictConfig, ListConfig, OmegaConf
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
DAMAGED = "damaged"  # summary.json is not one gradsync wrote: the run is left out, with a warning
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
    problems: list[str] = field(default_factory=list)
    """One line per damaged file of the run that was read without (it is named in the line)."""

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


def _not_started(root: Path, problems: list[str]) -> list[Run]:
    """Jobs a ``gradsync sweep --list`` array lists (``jobs.txt``) with no directory yet; a
    damaged file, or a line of it that is not shell words, is noted in ``problems``."""
    listed = root / JOBS_FILE
    if not listed.is_file():
        return []
    try:
        lines = listed.read_bytes().decode("utf-8").splitlines()
    except (OSError, ValueError) as exc:
        problems.append(f"{listed} is damaged ({_one_line(exc)}); jobs not started are not listed")
        return []
    runs, bad = [], []
    for n, line in enumerate(lines):
        try:
            overrides = shlex.split(line)
        except ValueError:  # an unclosed quote
            bad.append(n + 1)
            continue
        if not (root / str(n)).exists():
            runs.append(
                Run(
                    path=root / str(n),
                    status=NOT_STARTED,
                    error="listed in jobs.txt, not started yet",
                    overrides=overrides,
                )
            )
    if bad:
        problems.append(f"{listed}: skipped line(s) {shown_numbers(bad)}, not shell words")
    return runs


def shown_numbers(numbers: list[int]) -> str:
    """The first few of ``numbers``, for a warning."""
    return ", ".join(map(str, numbers[:5])) + (" …" if len(numbers) > 5 else "")


def _one_line(exc: BaseException) -> str:
    """An exception's whole message (PyYAML's spans lines, with the line and column) on one."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _load_yaml(path: Path, problems: list[str]) -> DictConfig | ListConfig | None:
    """The file's content, None where there is none; a damaged file is noted and None."""
    if not path.is_file():
        return None
    try:
        return OmegaConf.load(path)
    # Not a closed set: PyYAML's constructors raise what their conversions do (ValueError for
    # "!!float x", AttributeError for "!!timestamp x", RecursionError for an alias that holds
    # itself), OmegaConf its own errors and OSError. Any of them means the file is damaged.
    except Exception as exc:
        problems.append(f"{path} is damaged ({_one_line(exc)}); the run is read without it")
        return None


def _mapping(path: Path, problems: list[str]) -> DictConfig | None:
    """A YAML file Hydra writes as a mapping (config.yaml, hydra.yaml)."""
    content = _load_yaml(path, problems)
    if content is None or isinstance(content, DictConfig):
        return content
    problems.append(f"{path} is damaged (a list, not a mapping); the run is read without it")
    return None


def _overrides(path: Path, problems: list[str]) -> list[str] | None:
    """``.hydra/overrides.yaml``: a list of strings."""
    content = _load_yaml(path, problems)
    if content is None:
        return None
    overrides = OmegaConf.to_container(content, resolve=False)
    if isinstance(overrides, list) and all(isinstance(o, str) for o in overrides):
        return [str(o) for o in overrides]
    problems.append(f"{path} is damaged (not a list of overrides); the run is read without it")
    return None


def _choices(path: Path, problems: list[str]) -> dict[str, str]:
    """The option Hydra chose in each config group, from ``.hydra/hydra.yaml``."""
    hydra = _mapping(path, problems)
    try:
        choices = OmegaConf.select(hydra, "hydra.runtime.choices") if hydra is not None else None
    except OmegaConfBaseException:  # a damaged file whose keys are not what Hydra writes
        choices = None
    if not isinstance(choices, DictConfig):
        return {}
    values = OmegaConf.to_container(choices, resolve=False)
    assert isinstance(values, dict)  # a DictConfig's container
    return {str(k): str(v) for k, v in values.items() if v is not None}


def _metrics(path: Path, problems: list[str]) -> tuple[list[dict[str, Any]], list[int]]:
    try:
        records, bad_lines = read_metrics_file(path)
    except OSError as exc:
        problems.append(f"{path} cannot be read ({_one_line(exc)}); the run has no metrics")
        return [], []
    if path.is_file() and not records and not bad_lines:
        problems.append(f"{path} is empty; the run has no metrics")
    return records, bad_lines


def load_run(path: Path) -> Run:
    """The run in ``path``; status DAMAGED (and nothing else read) if its summary.json is."""
    try:
        summary = read_summary(path)
    except DamagedSummary as exc:
        return Run(path=path, status=DAMAGED, error=str(exc))
    problems: list[str] = []
    records, bad_lines = _metrics(path / METRICS_FILE, problems)
    overrides = _overrides(path / ".hydra" / "overrides.yaml", problems)
    choices = _choices(path / ".hydra" / "hydra.yaml", problems)
    config = _mapping(path / "config.yaml", problems) or _mapping(
        path / ".hydra" / "config.yaml", problems
    )
    if summary is not None:
        status, error = summary["status"], summary.get("error") or ""
    else:
        status, error = INCOMPLETE, "no summary.json: still running, or stopped before the end"
    if overrides is None:
        overrides = list(summary.get("overrides", [])) if summary else []
    return Run(
        path=path,
        status=status,
        error=error,
        overrides=overrides,
        choices=choices,
        config=config,
        records=continuous(records),
        bad_lines=bad_lines,
        problems=problems,
    )


@dataclass(frozen=True)
class Found:
    runs: list[Run]
    """Every run that can be reported, in ``find_runs``' order."""
    warnings: list[str]
    """One line per damaged file: runs left out for their summary.json, files read without."""


def collect_runs(paths: list[Path]) -> Found:
    """Every run under ``paths`` (each a run directory or any directory above some), in the
    order given, sweep jobs in number order; a run whose summary.json is damaged is left out
    with a warning. ReportError if a path is missing or holds none, or no run is left."""
    runs: dict[str, Run] = {}
    warnings: list[str] = []
    for path in paths:
        if not path.is_dir():
            raise ReportError(f"{path} is not a directory; give run or sweep directories")
        dirs = list(_run_dirs(path))
        found = [load_run(d) for d in dirs]
        # Sweeps inside what was asked for: one run of a sweep does not bring its siblings.
        for sweep in sorted({d.parent for d in dirs if d != path} | {path}):
            found += _not_started(sweep, warnings)
        if not found:
            raise ReportError(
                f"no runs under {path}: a run directory holds metrics.jsonl or summary.json"
            )
        for run in sorted(found, key=lambda run: _path_order(run.path)):
            runs.setdefault(os.path.realpath(run.path), run)
    return _usable(list(runs.values()), warnings)


def _usable(runs: list[Run], warnings: list[str]) -> Found:
    """The runs but those with a damaged summary.json, each of which is one warning; with the
    problems of the others' files. ReportError if none is left."""
    skipped = [run for run in runs if run.status == DAMAGED]
    usable = [run for run in runs if run.status != DAMAGED]
    if not usable:
        more = f" ({len(skipped) - 1} more run(s) left out as well)" if len(skipped) > 1 else ""
        raise ReportError(f"no run to report: {skipped[0].error}{more}")
    for run in runs:
        warnings += [f"{run.error}; the run is left out"] if run.status == DAMAGED else run.problems
    return Found(usable, warnings)


def find_runs(paths: list[Path]) -> list[Run]:
    """The runs ``collect_runs`` finds, without its warnings."""
    return collect_runs(paths).runs


def _path_order(path: Path) -> tuple[tuple[bool, int, str], ...]:
    return tuple(job_order(Path(part)) for part in path.parts)
