"""The report's figures, drawn with matplotlib's object API (no pyplot, so no display and no
global state): each function returns a Figure, or None when no run logged what it shows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from gradsync.metrics.summary import steady_mean
from gradsync.report.naming import WORKERS, Naming, method_of
from gradsync.report.runs import Run
from gradsync.report.table import TIME_PARTS, EvalMetric, eval_metrics, time_parts

_END_MARKERS = {"failed": "X", "interrupted": "X", "terminated": "X", "incomplete": ">"}
"""Drawn at the last point of a run that did not complete: where it stopped."""
_WIDTH = 8.0


@dataclass(frozen=True)
class Drawing:
    """What the figures share: the runs, their names and one colour per name."""

    runs: Sequence[Run]
    naming: Naming
    group_by: Sequence[str]

    def groups(self) -> list[tuple[str, list[Run]]]:
        return [(label, [self.runs[i] for i in at]) for label, at in self.naming.groups().items()]

    def colour(self, label: str) -> tuple[float, ...]:
        names = list(self.naming.groups())
        palette = "tab10" if len(names) <= 10 else "tab20"
        return colormaps[palette](names.index(label) % (10 if palette == "tab10" else 20))

    def legend_name(self, label: str, runs: Sequence[Run]) -> str:
        """The label, marked when some of its runs did not complete."""
        unfinished = [run.status for run in runs if not run.finished]
        if not unfinished:
            return label
        if len(runs) == 1:
            return f"{label} [{unfinished[0]}]"
        return f"{label} [{len(unfinished)} of {len(runs)} not completed]"


def _new_figure(rows: int = 1, height: float = 4.5) -> tuple[Figure, list[Axes]]:
    figure = Figure(figsize=(_WIDTH, height * rows), layout="constrained")
    axes = [figure.add_subplot(rows, 1, i + 1) for i in range(rows)]
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return figure, axes


def _legend(ax: Axes, entries: int) -> None:
    if entries > 6:  # beside the plot, so lines stay visible
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    elif entries:
        ax.legend(fontsize="small")


def _spans_decades(values: Sequence[float]) -> bool:
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) / min(positive) >= 100


def _lines(
    ax: Axes,
    drawing: Drawing,
    key: str,
    *,
    x: str = "step",
    scale: float = 1.0,
    skip: Callable[[Run], bool] = lambda run: False,
) -> list[float]:
    """One line per run that logged ``key``, coloured by its name; the values drawn."""
    drawn: list[float] = []
    for label, group in drawing.groups():
        named = False
        for run in group:
            xs, ys = run.series(key, x=x)
            if not ys or skip(run):
                continue
            ys = [y * scale for y in ys]
            colour = drawing.colour(label)
            name = None if named else drawing.legend_name(label, group)
            ax.plot(
                xs,
                ys,
                color=colour,
                label=name,
                linewidth=1.5,
                marker="." if len(xs) < 30 else None,
            )
            if run.status in _END_MARKERS:
                ax.plot(xs[-1], ys[-1], _END_MARKERS[run.status], color=colour, markersize=10)
            named = True
            drawn += ys
    return drawn


def density(drawing: Drawing) -> Figure | None:
    figure, (ax,) = _new_figure()
    drawn = _lines(ax, drawing, "comm/density_actual")
    if not drawn:
        return None
    for label, group in drawing.groups():
        for run in group:
            xs, ys = run.series("comm/density_setup")
            ax.plot(xs, ys, "--", color=drawing.colour(label), linewidth=1.0, alpha=0.8)
            drawn += ys
    ax.plot([], [], "--", color="grey", label="setup density (dashed)")
    if min(drawn) < 0.1:
        ax.set_yscale("log")
    ax.set(
        xlabel="step",
        ylabel="density (fraction of gradient elements sent)",
        title="Actual density (solid) and setup density (dashed)",
    )
    _legend(ax, len(drawing.groups()) + 1)
    return figure


def error_norm(drawing: Drawing) -> Figure | None:
    figure, (ax,) = _new_figure()
    drawn = _lines(
        ax,
        drawing,
        "comm/error_norm",
        skip=lambda run: not any(run.values("comm/error_norm")),
    )
    if not drawn:
        return None
    if _spans_decades(drawn):
        ax.set_yscale("log")
    ax.set(
        xlabel="step",
        ylabel="error-feedback norm ‖e‖₂ (mean over workers)",
        title="Error-feedback residual over training",
    )
    _legend(ax, len(drawing.groups()))
    return figure


def _eval_figure(drawing: Drawing, x: str, xlabel: str, what: str) -> Figure | None:
    metrics: list[EvalMetric] = eval_metrics(drawing.runs)
    if not metrics:
        return None
    figure, axes = _new_figure(rows=len(metrics))
    for ax, metric in zip(axes, metrics, strict=True):
        drawn = _lines(ax, drawing, metric.key, x=x, scale=100.0 if metric.percent else 1.0)
        if not metric.higher_is_better and drawn:  # perplexity: log scale is the loss's scale
            ax.set_yscale("log")
        if x == "time/elapsed":
            ax.set_xlim(left=0)
        unit = " (%)" if metric.percent else ""
        ax.set(xlabel=xlabel, ylabel=f"eval {metric.name}{unit}", title=f"{metric.name} {what}")
        _legend(ax, len(drawing.groups()))
    return figure


def eval_by_time(drawing: Drawing) -> Figure | None:
    return _eval_figure(
        drawing, "time/elapsed", "wall-clock time since training started (s)", "against time"
    )


def eval_by_step(drawing: Drawing) -> Figure | None:
    return _eval_figure(drawing, "step", "step", "against steps")


def _bar_figure(count: int) -> tuple[Figure, Axes]:
    figure, (ax,) = _new_figure(height=1.2 + 0.45 * count)
    ax.grid(True, axis="x", alpha=0.3)
    ax.grid(False, axis="y")
    return figure, ax


def _with_throughput(drawing: Drawing) -> list[tuple[str, list[Run], list[float]]]:
    rows = []
    for label, group in drawing.groups():
        means = (steady_mean(run.values("perf/samples_per_s")) for run in group)
        rates = [r for r in means if r is not None]
        if rates:
            rows.append((label, group, rates))
    return rows


def throughput(drawing: Drawing) -> Figure | None:
    rows = _with_throughput(drawing)
    if not rows:
        return None
    figure, ax = _bar_figure(len(rows))
    names = [drawing.legend_name(label, group) for label, group, _ in rows]
    means = [sum(rates) / len(rates) for _, _, rates in rows]
    spread = [
        [m - min(rates) for m, (_, _, rates) in zip(means, rows, strict=True)],
        [max(rates) - m for m, (_, _, rates) in zip(means, rows, strict=True)],
    ]
    bars = ax.barh(
        names,
        means,
        color=[drawing.colour(label) for label, _, _ in rows],
        xerr=spread if any(len(r) > 1 for _, _, r in rows) else None,
        hatch=["//" if any(not run.finished for run in g) else "" for _, g, _ in rows],
    )
    for bar, mean, (_, _, rates) in zip(bars, means, rows, strict=True):
        y = bar.get_y() + bar.get_height() / 2  # the value just past the bar or its whisker
        ax.text(max(rates), y, f"  {mean:,.0f}", va="center", fontsize="small")
    ax.invert_yaxis()  # first run on top, as in the table
    ax.margins(x=0.15)
    ax.set(
        xlabel="throughput (samples/s, all workers; mean after the first log window)",
        title="Training throughput"
        + (" (bars: mean, whiskers: min–max)" if drawing.naming.grouped else ""),
    )
    return figure


def time_breakdown(drawing: Drawing) -> Figure | None:
    rows = []
    for label, group in drawing.groups():
        parts = [time_parts(run) for run in group]
        parts = [p for p in parts if p]
        if parts:
            rows.append((drawing.legend_name(label, group), parts))
    if not rows:
        return None
    figure, ax = _bar_figure(len(rows))
    names = [name for name, _ in rows]
    left = [0.0] * len(rows)
    palette = colormaps["Set2"]
    for i, part in enumerate((*TIME_PARTS, "other")):
        widths = [sum(p.get(part, 0.0) for p in parts) / len(parts) * 1e3 for _, parts in rows]
        ax.barh(names, widths, left=left, label=part, color=palette(i))
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set(
        xlabel="time per iteration (ms; mean after the first log window)",
        title="Time per iteration by part",
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return figure


def scaling(drawing: Drawing) -> Figure | None:
    keys = list(drawing.group_by) or drawing.naming.keys
    lines: dict[str, dict[int, list[float]]] = {}
    for run in [run for run in drawing.runs if run.finished]:
        workers, rate = run.setting(WORKERS), steady_mean(run.values("perf/samples_per_s"))
        # A count from a hand-edited or damaged config (0, true) would break the log axis.
        if (
            isinstance(workers, int)
            and not isinstance(workers, bool)
            and workers > 0
            and rate is not None
        ):
            lines.setdefault(method_of(run, keys), {}).setdefault(workers, []).append(rate)
    counts = {w for points in lines.values() for w in points}
    if len(counts) < 2:
        return None
    figure, (ax,) = _new_figure()
    palette = colormaps["tab10"]
    for i, (method, points) in enumerate(lines.items()):
        workers = sorted(points)
        rates = [sum(points[w]) / len(points[w]) for w in workers]
        ax.plot(workers, rates, "o-", color=palette(i % 10), label=method)
        ideal = [rates[0] * w / workers[0] for w in workers]
        ax.plot(workers, ideal, ":", color=palette(i % 10), alpha=0.6)
    ax.plot([], [], ":", color="grey", label="linear scaling from the fewest workers")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(counts), labels=[str(c) for c in sorted(counts)])
    ax.set(
        xlabel="workers",
        ylabel="throughput (samples/s, all workers)",
        title="Scaling with the number of workers",
    )
    _legend(ax, len(lines) + 1)
    return figure


@dataclass(frozen=True)
class Plot:
    file: str
    title: str
    draw: Callable[[Drawing], Figure | None]
    caption: str
    missing: str
    """Why the plot is absent when no run logged what it needs."""


_NOT_COMPLETED = "✕ marks where a failed run stopped, ▶ the last point of one without a summary"
PLOTS = (
    Plot(
        "density.png",
        "Density",
        density,
        "Distinct gradient elements communicated over all workers ÷ elements (comm/density_actual)"
        f", per log window. {_NOT_COMPLETED}.",
        "no run logged comm/density_actual",
    ),
    Plot(
        "error_norm.png",
        "Error-feedback norm",
        error_norm,
        "L2 norm of the residual each worker carries to its next step, mean over workers.",
        "no run kept an error-feedback residual (comm/error_norm is 0 or missing)",
    ),
    Plot(
        "eval_vs_time.png",
        "Evaluation against wall-clock time",
        eval_by_time,
        f"Wall-clock time from the start of training (evaluation included). {_NOT_COMPLETED}.",
        "no evaluations logged",
    ),
    Plot(
        "eval_vs_step.png",
        "Evaluation against steps",
        eval_by_step,
        "The same evaluations against optimizer steps.",
        "no evaluations logged",
    ),
    Plot(
        "throughput.png",
        "Throughput",
        throughput,
        "Global samples per second, mean over the log windows after the first; hatched bars: "
        "runs that did not complete.",
        "no run logged perf/samples_per_s",
    ),
    Plot(
        "time_breakdown.png",
        "Time breakdown",
        time_breakdown,
        "comm is waiting for communication that did not overlap with computation; other is the "
        "rest of time/iteration (data loading, bookkeeping).",
        "no run logged time/iteration",
    ),
    Plot(
        "scaling.png",
        "Scaling",
        scaling,
        "Completed runs' throughput against worker count, one line per setting of the other "
        "keys; dotted: linear scaling from the fewest workers.",
        "fewer than two worker counts among completed runs",
    ),
)
