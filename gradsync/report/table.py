"""The comparison table: one row per run, every value computed from its ``metrics.jsonl``."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gradsync.metrics.summary import steady_mean
from gradsync.report.naming import Naming, short_names, show
from gradsync.report.runs import Run


@dataclass(frozen=True)
class EvalMetric:
    key: str
    name: str
    higher_is_better: bool
    percent: bool  # logged as a fraction, shown as a percentage

    def best(self, values: Sequence[float]) -> float:
        return max(values) if self.higher_is_better else min(values)

    def reached(self, value: float, target: float) -> bool:
        return value >= target if self.higher_is_better else value <= target


EVAL_METRICS = (
    EvalMetric("eval/accuracy", "accuracy", higher_is_better=True, percent=True),
    EvalMetric("eval/accuracy_top5", "top-5 accuracy", higher_is_better=True, percent=True),
    EvalMetric("eval/perplexity", "perplexity", higher_is_better=False, percent=False),
    EvalMetric("eval/hr@10", "HR@10", higher_is_better=True, percent=True),
)
TIME_PARTS = ("forward", "backward", "compress", "comm", "update")
"""The parts of ``time/iteration`` drawn as stacked bars; the rest of it is "other"."""


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _last(values: Sequence[float]) -> float | None:
    return values[-1] if values else None


@dataclass(frozen=True)
class Column:
    """A table column: its CSV name, how its value comes from a run, how Markdown shows it."""

    name: str
    value: Callable[[Run], Any]
    shown: Callable[[Any], str] = show
    numeric: bool = True  # right-aligned in Markdown
    scale: float = 1.0  # logged unit → the unit in the column's name (fraction → %, s → ms)

    def of(self, run: Run) -> Any:
        value = self.value(run)
        return value * self.scale if value is not None and self.scale != 1.0 else value


def _two_decimals(value: float) -> str:
    return f"{value:.2f}"


def _bytes(value: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def _significant(value: float) -> str:
    return f"{value:.3g}"


def time_parts(run: Run) -> dict[str, float]:
    """Mean seconds per iteration in each part (steady windows), "other" the remainder."""
    parts = {p: steady_mean(run.values(f"time/{p}")) for p in TIME_PARTS}
    iteration = steady_mean(run.values("time/iteration"))
    if iteration is None:
        return {}
    measured = {p: v for p, v in parts.items() if v is not None}
    return {**measured, "other": max(iteration - sum(measured.values()), 0.0)}


def time_to_target(run: Run, metric: EvalMetric, target: float) -> tuple[float, int] | None:
    """(elapsed seconds, step) of the first evaluation that reached ``target``."""
    for record in run.records:
        value = record.get(metric.key)
        if value is not None and metric.reached(value, target):
            return record.get("time/elapsed", float("nan")), record["step"]
    return None


def eval_metrics(runs: Sequence[Run]) -> list[EvalMetric]:
    """The evaluation metrics some run logged."""
    return [m for m in EVAL_METRICS if any(run.values(m.key) for run in runs)]


def _eval_columns(metric: EvalMetric, targets: dict[str, float]) -> list[Column]:
    unit, scale = (" (%)", 100.0) if metric.percent else ("", 1.0)
    columns = [
        Column(
            f"{metric.name}{unit}",
            lambda r: _last(r.values(metric.key)),
            _two_decimals,
            scale=scale,
        ),
        Column(f"best {metric.name}{unit}", lambda r: _best(r, metric), _two_decimals, scale=scale),
    ]
    if metric.key in targets:
        target = targets[metric.key]
        goal = f"{target * 100:g}%" if metric.percent else f"{target:g}"

        def reached(run: Run, at: int) -> float | None:
            hit = time_to_target(run, metric, target)
            return hit[at] if hit else None

        columns += [
            Column(f"time to {goal} (s)", lambda r: reached(r, 0), lambda v: f"{v:.1f}"),
            Column(f"steps to {goal}", lambda r: reached(r, 1)),
        ]
    return columns


def _setting_column(name: str, key: str) -> Column:
    return Column(name, lambda r: r.setting(key), numeric=False)


def _time_part_column(part: str) -> Column:
    return Column(f"{part} (ms)", lambda r: time_parts(r).get(part), _two_decimals, scale=1e3)


def _best(run: Run, metric: EvalMetric) -> float | None:
    values = run.values(metric.key)
    return metric.best(values) if values else None


@dataclass(frozen=True)
class Table:
    lead: list[Column]
    """What names a run: its label, the settings that differ, its status."""
    results: list[Column]
    timing: list[Column]

    @property
    def columns(self) -> list[Column]:
        return [*self.lead, *self.results, *self.timing]


def build_table(runs: Sequence[Run], naming: Naming, targets: dict[str, float]) -> Table:
    short = short_names(naming.keys)
    labels = dict(zip(map(id, runs), naming.labels, strict=True))
    lead = [
        Column("run", lambda r: labels[id(r)], numeric=False),
        *[_setting_column(short[k], k) for k in naming.keys],
        Column("status", lambda r: r.status, numeric=False),
    ]
    results = [
        *[c for m in eval_metrics(runs) for c in _eval_columns(m, targets)],
        Column(
            "samples/s",
            lambda r: steady_mean(r.values("perf/samples_per_s")),
            lambda v: f"{v:.0f}",
        ),
        Column("bytes/step", lambda r: _mean(r.values("comm/bytes_sent")), _bytes),
        Column("density actual", lambda r: _mean(r.values("comm/density_actual")), _significant),
        Column("density setup", lambda r: _mean(r.values("comm/density_setup")), _significant),
        Column("error norm", lambda r: _last(r.values("comm/error_norm")), _significant),
    ]
    timing = [
        *[_time_part_column(part) for part in (*TIME_PARTS, "other")],
        Column(
            "iteration (ms)",
            lambda r: steady_mean(r.values("time/iteration")),
            _two_decimals,
            scale=1e3,
        ),
    ]
    return Table(lead, results, timing)


def table_rows(runs: Sequence[Run], table: Sequence[Column]) -> list[list[Any]]:
    return [[column.of(run) for column in table] for run in runs]


def to_csv(runs: Sequence[Run], table: Sequence[Column]) -> str:
    """Full precision, a blank for a value a run did not log, plus the run's error and path."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*(c.name for c in table), "error", "run_dir"])
    for run, row in zip(runs, table_rows(runs, table), strict=True):
        writer.writerow([*("" if v is None else v for v in row), run.error, str(run.path)])
    return out.getvalue()


def to_markdown(runs: Sequence[Run], table: Sequence[Column]) -> str:
    """Rounded for reading; "–" for a value a run did not log."""
    lines = [
        "| " + " | ".join(c.name for c in table) + " |",
        "|" + "|".join("--:" if c.numeric else "---" for c in table) + "|",
    ]
    for row in table_rows(runs, table):
        cells = ["–" if v is None else c.shown(v) for c, v in zip(table, row, strict=True)]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"
