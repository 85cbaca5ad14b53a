"""``gradsync report PATH...``: comparison tables and plots from run and sweep directories."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from gradsync.cli.command import CommandParser
from gradsync.config.files import writable_dir_problem
from gradsync.jobs.compose import ConfigError
from gradsync.report.document import Report, data_warnings, write_report
from gradsync.report.naming import name_runs
from gradsync.report.runs import ReportError, collect_runs
from gradsync.report.table import build_table, to_markdown

DESCRIPTION = """\
Compare runs: a table (report.md, report.csv) and PNG plots (density, error norm, evaluation
against time and steps, throughput, time breakdown, and scaling when the worker count varies).
PATH is a run directory, a sweep directory (local or Slurm), or any directory above them.
Everything is read from each run's metrics.jsonl and summary.json; a damaged file is skipped
with a warning (a run whose summary.json is damaged is left out)."""
EXAMPLES = """\
examples:
  gradsync report multirun/2026-11-23/10-00-00
  gradsync report outputs/dense multirun/sparse --target-accuracy 98
  gradsync report SWEEP --group-by compressor,compressor.density
  gradsync report SWEEP --label "{compressor} ρ={compressor.density}" --out figures/"""


def _parser() -> CommandParser:
    parser = CommandParser(
        "report",
        names_unknown_option=False,
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    parser.add_argument(
        "--out",
        type=Path,
        help="where to write the report (default: PATH/report for one PATH, else ./report)",
    )
    parser.add_argument(
        "--group-by",
        default="",
        metavar="KEYS",
        help="comma-separated settings that name runs; runs that share them form one group "
        "(one colour, one bar), e.g. compressor,trainer.workers",
    )
    parser.add_argument(
        "--label",
        metavar="TEMPLATE",
        help='legend names from settings, e.g. "{compressor} d={compressor.density}"; '
        "runs with the same name are grouped",
    )
    parser.add_argument(
        "--target-accuracy",
        type=float,
        metavar="ACC",
        help="add time and steps to this eval accuracy (a fraction, or a percentage above 1)",
    )
    parser.add_argument(
        "--target-perplexity",
        type=float,
        metavar="PPL",
        help="add time and steps to this eval perplexity",
    )
    return parser


def _targets(args: argparse.Namespace) -> dict[str, float]:
    targets = {}
    if args.target_accuracy is not None:
        accuracy = args.target_accuracy / 100 if args.target_accuracy > 1 else args.target_accuracy
        if not 0 < accuracy <= 1:
            raise ReportError(
                f"--target-accuracy={args.target_accuracy} is not an accuracy; give a fraction "
                "(0.98) or a percentage (98)"
            )
        targets["eval/accuracy"] = accuracy
    if args.target_perplexity is not None:
        if args.target_perplexity < 1:
            raise ReportError(f"--target-perplexity={args.target_perplexity} must be at least 1")
        targets["eval/perplexity"] = args.target_perplexity
    return targets


def report(args: list[str]) -> Path | None:
    """Write the report; its path, or None when the help was asked for (and printed)."""
    options = _parser().parse(args)
    if options is None:
        return None
    if options.label is not None and options.group_by:
        raise ReportError("give --group-by or --label, not both")
    targets = _targets(options)
    found = collect_runs(options.paths)
    runs = found.runs
    group_by = [key.strip() for key in options.group_by.split(",") if key.strip()]
    naming = name_runs(runs, group_by=group_by, template=options.label)
    table = build_table(runs, naming, targets)
    out = options.out or (
        options.paths[0] / "report" if len(options.paths) == 1 else Path("report")
    )
    unwritable = writable_dir_problem(out)
    if unwritable is not None:
        raise ReportError(f"cannot write the report to {out}: {unwritable}; give another --out")
    document = Report(
        runs=runs,
        naming=naming,
        table=table,
        group_by=group_by,
        command=shlex.join(["gradsync", "report", *args]),
        warnings=[*found.warnings, *data_warnings(runs, naming)],
    )
    for warning in document.warnings:
        # One line each: a run's error, as its summary.json holds it, may span several.
        print(f"gradsync: warning: {' '.join(warning.split())}", file=sys.stderr)
    path = write_report(document, out)
    print(to_markdown(runs, [*table.lead, *table.results]))
    print(f"report: {path} ({len(document.plots)} plots, table also in report.csv)")
    return path


def main(args: list[str]) -> int:
    try:
        report(args)
    except (ConfigError, ReportError) as exc:
        print(f"gradsync: error: {exc}", file=sys.stderr)
        return 2
    return 0
