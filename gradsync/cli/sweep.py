"""``gradsync sweep``: a sweep as plain text for schedulers gradsync does not drive itself.

* ``gradsync sweep --list OVERRIDES...`` checks every job like ``gradsync run -m`` and prints
  one line of overrides per job (shell-quoted), in the order ``run -m`` numbers them. Line i is
  what array task i runs (``scripts/slurm/``).
* ``gradsync sweep --summarize SWEEP_DIR`` writes ``summary.csv`` from the jobs' directories,
  prints one line per job, and exits 1 if any job failed or left no summary.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from gradsync.cli.command import CommandParser, docstring_help
from gradsync.jobs.compose import ConfigError, check_sweep, expand_sweep
from gradsync.metrics.summary import JOBS_FILE
from gradsync.metrics.sweep_summary import sweep_rows, write_sweep_summary

SCHEDULER_LOG = "slurm.out"  # each array task's output, in its job directory
USAGE = "usage: gradsync sweep --list OVERRIDE... | gradsync sweep --summarize SWEEP_DIR"


def list_jobs(overrides: list[str]) -> list[str]:
    """One shell-quoted line of overrides per job. ConfigError if a job cannot be composed
    or none is valid; a job with an invalid value is listed and fails when it runs. The jobs
    run on the cluster's nodes, so whether this host could start them is not asked."""
    check_sweep(overrides, launcher_here=False)
    return [shlex.join(job) for job in expand_sweep(overrides)]


def summarize(sweep_dir: Path) -> int:
    if not sweep_dir.exists():
        raise ConfigError(f"sweep directory {sweep_dir} does not exist")
    if not sweep_dir.is_dir():
        raise ConfigError(f"{sweep_dir} is a file; give the sweep's directory")
    listed = sweep_dir / JOBS_FILE
    # Counted in bytes: a damaged jobs.txt still lists as many jobs as it has lines.
    expected = len(listed.read_bytes().splitlines()) if listed.is_file() else 0
    rows = sweep_rows(sweep_dir, expected_jobs=expected)
    if not rows:
        raise ConfigError(
            f"{sweep_dir} holds no jobs: a sweep directory has one numbered directory per job "
            f"(or the {JOBS_FILE} a Slurm array lists them in)"
        )
    path = write_sweep_summary(sweep_dir, rows)
    for row in rows:
        line = f"job {row['job']}: {row['status']}"
        if row["status"] != "completed":
            log = Path(row["run_dir"]) / SCHEDULER_LOG
            line += f": {row['error']}" + (f" (log: {log})" if log.is_file() else "")
        print(line)
    print(f"sweep summary: {path}")
    failed = [row for row in rows if row["status"] != "completed"]
    return 1 if failed else 0


def _parser() -> CommandParser:
    parser = CommandParser("sweep", help_text=docstring_help(USAGE, __doc__))
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--list", nargs="*", metavar="OVERRIDE")
    mode.add_argument("--summarize", type=Path, metavar="SWEEP_DIR")
    return parser


def main(args: list[str]) -> int:
    try:
        parsed = _parser().parse(args)
        if parsed is None:
            return 0  # the help was asked for
        if parsed.list is not None:
            print("\n".join(list_jobs(parsed.list)))
            return 0
        if parsed.summarize is not None:
            return summarize(parsed.summarize)
        raise ConfigError(USAGE)
    except ConfigError as exc:
        print(f"gradsync: error: {exc}", file=sys.stderr)
        return 2
