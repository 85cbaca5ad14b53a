"""Assembling a report (tables, notes, figures) and writing it so that a failure part-way leaves
any earlier report in the output directory as it was."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gradsync.metrics.summary import METRICS_FILE
from gradsync.report.naming import Naming
from gradsync.report.plots import PLOTS, Drawing
from gradsync.report.runs import Run, shown_numbers
from gradsync.report.table import EVAL_METRICS, Table, to_csv, to_markdown

REPORT_FILE = "report.md"
TABLE_FILE = "report.csv"
_CHECKED_METRICS = (
    *(m.key for m in EVAL_METRICS),
    "perf/samples_per_s",
    "comm/bytes_sent",
    "comm/density_actual",
    "comm/error_norm",
    "time/iteration",
)
"""Metrics the table and plots use: a run without one that others logged is noted."""


@dataclass
class Report:
    runs: Sequence[Run]
    naming: Naming
    table: Table
    group_by: Sequence[str]
    command: str
    warnings: list[str] = field(default_factory=list)
    plots: dict[str, str] = field(default_factory=dict)
    """File name → title of every figure drawn."""
    missing_plots: dict[str, str] = field(default_factory=dict)
    """Title → why it was not drawn."""


def data_warnings(runs: Sequence[Run], naming: Naming) -> list[str]:
    """Skipped lines, runs that did not complete, metrics only some runs logged."""
    warnings = []
    for run in runs:
        if run.bad_lines:
            warnings.append(
                f"{run.path / METRICS_FILE}: skipped {len(run.bad_lines)} line(s) that are not "
                f"metric records, damaged or cut short (line {shown_numbers(run.bad_lines)}); "
                "the rest of the run is reported"
            )
    for label, run in zip(naming.labels, runs, strict=True):
        if not run.finished:
            warnings.append(f"{label}: {run.status}" + (f": {run.error}" if run.error else ""))
    for key in _CHECKED_METRICS:
        without = [
            label for label, run in zip(naming.labels, runs, strict=True) if not run.values(key)
        ]
        if without and len(without) < len(runs):
            warnings.append(f"{key} not logged by: {', '.join(without)}")
    return warnings


def markdown(report: Report) -> str:
    runs, table = report.runs, report.table
    done = sum(run.finished for run in runs)
    parts = [
        "# gradsync report\n",
        f"{len(runs)} runs ({done} completed). Made with `{report.command}`; every value comes "
        "from the runs' `metrics.jsonl` (training windows: means over their steps; throughput "
        "and times: mean over the windows after the first).\n",
        "## Results\n",
        to_markdown(runs, [*table.lead, *table.results]),
        "## Time per iteration\n",
        to_markdown(runs, [table.lead[0], *table.timing]),
    ]
    if report.warnings:
        parts += ["## Notes\n", "\n".join(f"- {w}" for w in report.warnings) + "\n"]
    parts.append("## Plots\n")
    for plot in PLOTS:
        if plot.file in report.plots:
            parts.append(f"### {plot.title}\n\n![{plot.title}]({plot.file})\n\n{plot.caption}\n")
    for title, why in report.missing_plots.items():
        parts.append(f"- {title}: not drawn ({why})")
    return "\n".join(parts).rstrip() + "\n"


def write_report(report: Report, out_dir: Path) -> Path:
    """Draw every figure and write tables and ``report.md`` into a scratch directory, then move
    them into ``out_dir`` together, removing figures of an earlier report that no longer apply."""
    out_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".report-", dir=out_dir))
    try:
        drawing = Drawing(report.runs, report.naming, report.group_by)
        for plot in PLOTS:
            figure = plot.draw(drawing)
            if figure is None:
                report.missing_plots[plot.title] = plot.missing
                continue
            figure.savefig(scratch / plot.file, dpi=110, bbox_inches="tight")
            report.plots[plot.file] = plot.title
        (scratch / TABLE_FILE).write_text(to_csv(report.runs, report.table.columns), "utf-8")
        (scratch / REPORT_FILE).write_text(markdown(report), encoding="utf-8")
        for plot in PLOTS:
            if plot.file not in report.plots:
                (out_dir / plot.file).unlink(missing_ok=True)
        for produced in scratch.iterdir():
            os.replace(produced, out_dir / produced.name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out_dir / REPORT_FILE
