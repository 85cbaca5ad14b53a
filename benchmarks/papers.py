"""A paper's own timing table, predicted by ``gradsync simulate`` for the paper's cluster.

``python -m benchmarks.papers omgs [--write] [--remeasure]``: the OMGS-SGD paper's Table VI
(ResNet-50 row) and its dense communication time, from the cluster it describes
(``benchmarks/clusters/omgs_p102_1gbe.yaml``: 16 × P102-100 over 1 GbE, every value the paper's
or its authors' code's). Each cell is printed with its error, first with nothing fitted, then
with one scalar fitted on TopK-SGD's 0.666 s and frozen for every other cell.

This host only spreads the paper's compute over ResNet-50's tensors (its profile's shares)
and records what the compressors send; the profile is kept in
``benchmarks/results/papers/omgs_p102_1gbe_measured.json`` (``--remeasure`` takes it afresh,
about a minute). See docs/guide/papers.md.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import DictConfig

from benchmarks.report import Part, add_part_arguments, run_parts
from gradsync.jobs.alternatives import Alternative, compose_alternatives
from gradsync.measure.jobs import Predictor, cluster_for
from gradsync.projection.cluster import Cluster
from gradsync.projection.cluster_spec import Described, load
from gradsync.projection.estimates import Estimate

ROOT = Path(__file__).resolve().parents[1]
CLUSTERS = ROOT / "benchmarks" / "clusters"
MEASURED = ROOT / "benchmarks" / "results" / "papers"
FIT_STEPS = 40  # bisection steps of the fitted scalar: well below a microsecond


@dataclass(frozen=True)
class Row:
    """One cell of the paper's table: how gradsync predicts it, and what the paper reports."""

    label: str
    paper: float | None
    """The paper's value (None: a row the paper has no cell for)."""
    paper_groups: int | None
    alternative: Alternative | None
    """What gradsync runs for it (None: a ratio or the dense exchange, derived below)."""


@dataclass(frozen=True)
class Check:
    """One acceptance range of a predicted cell."""

    label: str
    low: float
    high: float
    groups: int | None = None


@dataclass(frozen=True)
class PaperTable:
    """A paper's table on its cluster: the job, the cluster file, its rows and their ratios."""

    job: tuple[str, ...]
    cluster: str
    rows: tuple[Row, ...]
    fitted_on: str
    """The row whose paper value the one scalar is fitted on."""
    ratios: Mapping[str, tuple[str, str, float]]
    """label: (numerator row, denominator row, the paper's value)."""
    dense_comm: float
    """The paper's dense communication time per iteration."""
    checks: tuple[Check, ...]


TOPK, MGS, OMGS = "TopK-SGD", "MGS-SGD", "OMGS-SGD (the paper's rule)"
OPTIMUM = "OMGS, the model's exact optimum"
OMGS_TABLE = PaperTable(
    job=(
        "experiment=omgs_resnet50_imagenet",  # ResNet-50, batch 16, ρ = 0.001, values + indices
        "dataset=synthetic",  # ImageNet's shapes, for the profile's shares
        "dataset.image_shape=[3,224,224]",
        "dataset.num_classes=1000",
    ),
    cluster="omgs_p102_1gbe.yaml",
    rows=(
        Row(TOPK, 0.666, 1, Alternative("topk", "allreduce")),
        Row(MGS, 1.217, 53, Alternative("topk", "mgs", ("scheduler.threshold=8192",))),
        Row(OMGS, 0.507, 2, Alternative("topk", "omgs", ("scheduler.rule=paper",))),
        Row(
            "OMGS, the authors' code's rule",
            None,
            None,
            Alternative("topk", "omgs", ("scheduler.rule=code",)),
        ),
        Row(
            "OMGS, the model's exact optimum",
            None,
            None,
            Alternative("topk", "omgs", ("scheduler.rule=optimal",)),
        ),
    ),
    fitted_on=TOPK,
    ratios={
        "s1 = TopK / OMGS": (TOPK, OMGS, 1.313),
        "s2 = MGS / OMGS": (MGS, OMGS, 2.4),
        "s1 with the exact optimum": (TOPK, OPTIMUM, 1.313),
        "s2 with the exact optimum": (MGS, OPTIMUM, 2.4),
    },
    dense_comm=1.92,
    checks=(
        Check("s2 = MGS / OMGS", 1.80, 3.00),
        Check("s1 = TopK / OMGS", 1.10, 1.64),
        Check(MGS, 0.91, 1.52, groups=53),
        Check("dense communication", 1.44, 2.40),
    ),
)


@dataclass(frozen=True)
class Predicted:
    seconds: dict[str, float]
    groups: dict[str, int | None]
    dense_comm: float


@dataclass
class PaperJob:
    """A paper's table made ready to predict: its jobs composed, its cluster built."""

    table: PaperTable
    described: Described
    predictor: Predictor
    composed: dict[str, DictConfig]
    """Each row's job (by label), and the dense job (``DENSE``)."""
    cluster: Cluster

    @classmethod
    def of(cls, table: PaperTable, store: Path | None) -> PaperJob:
        described = Described(load(CLUSTERS / table.cluster, []))
        predictor = Predictor(compute=described.compute(), plans_here=False)
        if store is not None:
            predictor.load(store)
        rows = [row for row in table.rows if row.alternative is not None]
        composed = compose_alternatives(
            table.job, [DENSE_JOB, *(row.alternative for row in rows if row.alternative)]
        )
        problems = [c.problem for c in composed if c.problem is not None]
        if problems:
            raise SystemExit(f"the paper's jobs do not compose: {problems[0]}")
        jobs = {DENSE: composed[0].cfg}
        jobs.update({row.label: c.cfg for row, c in zip(rows, composed[1:], strict=True)})
        cluster = described.cluster(cluster_for(composed[0].cfg))
        return cls(table, described, predictor, jobs, cluster)

    def predict(self, selection_scale: float, only: str | None = None) -> Predicted:
        """Every row (or the row labelled ``only``) with the cluster's selection costs times
        ``selection_scale``."""
        costs = self.described.selection(list(_compressors(self.table)))
        self.predictor.selection = {
            name: replace(cost, d_log2_d=cost.d_log2_d * selection_scale)
            for name, cost in costs.items()
        }
        estimates: dict[str, Estimate] = {}
        for row in self.table.rows:
            if row.alternative is not None and only in (None, row.label):
                estimates[row.label] = self.predictor.estimate(
                    self.composed[row.label],
                    scheduler=row.alternative.scheduler,
                    compressor=row.alternative.compressor,
                    cluster=self.cluster,
                )
        return Predicted(
            seconds={label: e.iteration for label, e in estimates.items()},
            groups={label: e.groups for label, e in estimates.items()},
            dense_comm=self._dense_comm(),
        )

    def _dense_comm(self) -> float:
        """Seconds of one dense exchange of the whole gradient on the cluster (what the
        paper's introduction calls ResNet-50's communication time)."""
        cfg = self.composed[DENSE]
        numel = self.predictor.profiled(cfg).profile.numel
        wire = self.predictor.wire(cfg, DENSE_JOB.compressor, self.cluster.workers)
        return wire.transfer_seconds(self.cluster, numel)


DENSE = "dense"
DENSE_JOB = Alternative("none", "allreduce")


def _compressors(table: PaperTable) -> set[str]:
    return {row.alternative.compressor for row in table.rows if row.alternative is not None}


def _fitted_scale(job: PaperJob) -> float:
    """The selection scale at which the ``fitted_on`` row takes the paper's time (bisection:
    the iteration grows with the selection cost)."""
    table = job.table
    (target,) = [row.paper for row in table.rows if row.label == table.fitted_on]
    assert target is not None

    def gap(scale: float) -> float:
        return job.predict(scale, only=table.fitted_on).seconds[table.fitted_on] - target

    low, high = 0.0, 1.0
    while gap(high) < 0:
        low, high = high, high * 2
        if high > 1e4:
            raise SystemExit(f"no selection scale brings {table.fitted_on} to {target} s")
    for _ in range(FIT_STEPS):
        middle = (low + high) / 2
        low, high = (middle, high) if gap(middle) < 0 else (low, middle)
    return (low + high) / 2


def _cells(table: PaperTable, p: Predicted) -> dict[str, float]:
    cells = dict(p.seconds)
    for label, (top, bottom, _) in table.ratios.items():
        cells[label] = p.seconds[top] / p.seconds[bottom]
    cells["dense communication"] = p.dense_comm
    return cells


@dataclass(frozen=True)
class Evaluated:
    raw: Predicted
    """Every cell with nothing fitted."""
    fitted: Predicted
    """Every cell with the selection scale fitted on the table's ``fitted_on`` row."""
    scale: float

    def cells(self, table: PaperTable) -> tuple[dict[str, float], dict[str, float]]:
        return _cells(table, self.raw), _cells(table, self.fitted)

    def failed(self, table: PaperTable) -> list[str]:
        """The table's checks the fitted column misses."""
        calibrated = _cells(table, self.fitted)
        return [
            check.label
            for check in table.checks
            if not check.low <= calibrated[check.label] <= check.high
            or (check.groups is not None and self.fitted.groups[check.label] != check.groups)
        ]


def evaluate(job: PaperJob) -> Evaluated:
    scale = _fitted_scale(job)
    return Evaluated(raw=job.predict(1.0), fitted=job.predict(scale), scale=scale)


def paper_table(table: PaperTable, remeasure: bool) -> str:
    store = stored_measurements(table)
    job = PaperJob.of(table, None if remeasure or not store.exists() else store)
    evaluated = evaluate(job)
    MEASURED.mkdir(parents=True, exist_ok=True)
    job.predictor.save(store)
    return _report(table, evaluated)


def stored_measurements(table: PaperTable) -> Path:
    """Where the profile and wire formats a table's prediction starts from are kept."""
    return MEASURED / f"{Path(table.cluster).stem}_measured.json"


def _report(table: PaperTable, evaluated: Evaluated) -> str:
    uncalibrated, calibrated = evaluated.cells(table)
    raw, fitted = evaluated.raw, evaluated.fitted
    paper: dict[str, float | None] = {row.label: row.paper for row in table.rows}
    paper.update({label: value for label, (_, _, value) in table.ratios.items()})
    paper["dense communication"] = table.dense_comm
    groups = {row.label: row.paper_groups for row in table.rows}
    lines = [
        f"Cluster `benchmarks/clusters/{table.cluster}`; job `{' '.join(table.job)}`. Fitted "
        f"scalar: **selection scale ×{evaluated.scale:.3g}** (the cluster's top-k cost "
        f"s·d·log2 d times it), fitted on {table.fitted_on}'s {paper[table.fitted_on]} s, then "
        "frozen.",
        "",
        "| cell | paper | uncalibrated | error | groups | fitted | error | groups |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label in calibrated:
        lines.append(
            f"| {label} | {_value(paper.get(label), groups.get(label))} "
            f"| {_pair(uncalibrated[label], paper.get(label), raw.groups.get(label))} "
            f"| {_pair(calibrated[label], paper.get(label), fitted.groups.get(label))} |"
        )
    lines += ["", "Acceptance, on the fitted column:", ""]
    failed = evaluated.failed(table)
    for check in table.checks:
        text = f"{calibrated[check.label]:.3f} in [{check.low:.2f}, {check.high:.2f}]"
        if check.groups is not None:
            text += f" with {fitted.groups.get(check.label)} groups (wanted {check.groups})"
        lines.append(f"- {check.label}: {text}: {'FAIL' if check.label in failed else 'pass'}")
    return "\n".join(lines)


def _value(value: float | None, groups: int | None) -> str:
    if value is None:
        return "—"
    if groups is None:
        return f"{value:.3f}"
    return f"{value:.3f} ({groups} group{'s' if groups > 1 else ''})"


def _pair(predicted: float, paper: float | None, groups: int | None) -> str:
    error = f"{(predicted - paper) / paper:+.0%}" if paper else "—"
    return f"{predicted:.3f} | {error} | {groups if groups is not None else '—'}"


def _omgs(remeasure: bool) -> Callable[[], str]:
    return lambda: paper_table(OMGS_TABLE, remeasure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_part_arguments(parser, ["omgs"])
    parser.add_argument(
        "--remeasure", action="store_true", help="profile here afresh (about a minute)"
    )
    args = parser.parse_args()
    parts = {
        "omgs": Part(
            "OMGS: Table VI predicted for the paper's own cluster",
            _omgs(args.remeasure),
            "the ResNet-50 row of Table VI (16 × P102-100, 1 GbE) and the dense communication "
            "time, predicted from the paper's own inputs, with nothing fitted and with one "
            "fitted scalar",
        )
    }
    run_parts(parser, args, parts, "papers")


if __name__ == "__main__":
    main()
