"""Parameter-server synchronization on a shaped network, in the spirit of the OSP paper's
Figure 6: throughput and accuracy after the same epochs of ps_bsp, asp, ssp and osp, 4 workers
and 1 parameter server under ``runner=netem`` (every process's link shaped, so the server's link
carries the incast of all pushes). Needs root (network namespaces). From the repo root:

    .venv/bin/python -m benchmarks.ps_netem --write

The ``corrections`` part trains ASP and SSP with each ``scheduler.staleness_correction`` over
``--seeds`` seeds, and reports how much of their accuracy gap to BSP each closes:

    .venv/bin/python -m benchmarks.ps_netem corrections --seeds 3 --dc-lambda 0.04 --write
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from benchmarks.measure import run_job
from benchmarks.report import Part, add_part_arguments, run_parts
from benchmarks.reproduce import AS_PUBLISHED
from gradsync.metrics.summary import read_metrics
from gradsync.schedulers.staleness_options import CORRECTIONS

BSP = "BSP (ps_bsp)"
SCHEMES = {
    BSP: ["scheduler=ps_bsp"],
    "ASP": ["scheduler=asp"],
    "SSP (s=3)": ["scheduler=ssp"],
    "OSP": ["scheduler=osp"],
}
STALE = ("ASP", "SSP (s=3)")  # the schemes that apply gradients late
CORRECTIONS_RATE = "20mbit"


def _common(args: argparse.Namespace, bandwidth: str) -> list[str]:
    return [
        "runner=netem",
        f"runner.bandwidth={bandwidth}",
        f"trainer.workers={args.workers}",
        "trainer.servers=1",
        f"model={args.model}",
        f"dataset={args.dataset}",
        f"trainer.epochs={args.epochs}",
        "trainer.log_every=5",
        "trainer.checkpoint=false",
    ]


def _measured(run_dir: Path, skip: int) -> tuple[float, float, float, float]:
    """(mean time/iteration after ``skip`` steps, final accuracy, mean unimportant fraction,
    largest logged staleness)."""
    records = read_metrics(run_dir)
    windows = [r for r in records if "time/iteration" in r and r["step"] > skip]
    accuracy = [r["eval/accuracy"] for r in records if "eval/accuracy" in r][-1]
    return (
        statistics.mean(r["time/iteration"] for r in windows),
        accuracy,
        statistics.mean(r.get("sched/unimportant_fraction", 0.0) for r in windows),
        max(r.get("sched/staleness", 0.0) for r in windows),
    )


def _folder(root: str, *names: str) -> Path:
    """A run directory named after ``names`` in characters Hydra's override parser takes."""
    safe = ("".join(c if c.isascii() and c.isalnum() else "_" for c in n) for n in names)
    return Path(root) / "_".join(safe)


def table(args: argparse.Namespace, bandwidth: str) -> str:
    measured = {}
    with tempfile.TemporaryDirectory() as root:
        for name, overrides in SCHEMES.items():
            published = [AS_PUBLISHED] if name in STALE else []
            job = [*overrides, *published, *_common(args, bandwidth)]
            run_dir = run_job(job, _folder(root, name))
            measured[name] = _measured(run_dir, skip=5)
    reference = measured[BSP][0]
    lines = [
        "| scheme | iteration (ms) | samples/s | vs BSP | final accuracy (%) "
        "| unimportant fraction (mean) | max staleness (rank 0) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (seconds, accuracy, unimportant, staleness) in measured.items():
        samples = args.workers * 32 / seconds
        lines.append(
            f"| {name} | {seconds * 1e3:.1f} | {samples:.0f} | {reference / seconds:.2f}x "
            f"| {accuracy * 100:.2f} | {unimportant:.3f} | {staleness:.0f} |"
        )
    return "\n".join(lines)


def _variants(args: argparse.Namespace) -> list[tuple[str, str, list[str]]]:
    """(scheme, correction as shown, overrides): BSP, then each stale scheme with each
    correction (dc once per ``--dc-lambda``)."""
    rows = [(BSP, "—", SCHEMES[BSP])]
    for scheme in STALE:
        for correction in args.corrections:
            option = [*SCHEMES[scheme], f"scheduler.staleness_correction={correction}"]
            if correction != "dc" or not args.dc_lambda:
                rows.append((scheme, correction, option))
                continue
            for lam in args.dc_lambda:
                rows.append((scheme, f"dc, λ={lam:g}", [*option, f"scheduler.dc_lambda={lam}"]))
    return rows


def _final_and_staleness(run_dir: Path) -> tuple[float, float]:
    """(final accuracy, mean over the log windows of rank 0's applied staleness)."""
    records = read_metrics(run_dir)
    accuracy = [r["eval/accuracy"] for r in records if "eval/accuracy" in r][-1]
    applied = [r["sched/applied_staleness"] for r in records if "sched/applied_staleness" in r]
    return accuracy, statistics.mean(applied)


def corrections_table(args: argparse.Namespace) -> str:
    """Final accuracy over seeds of BSP and of ASP/SSP with each staleness correction, and the
    share of the stale scheme's gap to BSP each correction closes (of the seeds' means)."""
    seeds = range(args.seeds)
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as root:
        for scheme, correction, overrides in _variants(args):
            for seed in seeds:
                job = [*overrides, *_common(args, CORRECTIONS_RATE), f"trainer.seed={seed}"]
                run_dir = run_job(job, _folder(root, scheme, correction, str(seed)))
                results.setdefault((scheme, correction), []).append(_final_and_staleness(run_dir))
    mean = {key: statistics.mean(a for a, _ in runs) for key, runs in results.items()}
    lines = [
        "| scheme | staleness correction | final accuracy (%), mean | per seed "
        "| gap to BSP closed | applied staleness (mean, rank 0) |",
        "|---|---|---:|---|---:|---:|",
    ]
    for (scheme, correction), runs in results.items():
        uncorrected = mean.get((scheme, "none"))
        gap = None if uncorrected is None else mean[(BSP, "—")] - uncorrected
        closed = (
            f"{(mean[(scheme, correction)] - uncorrected) / gap:+.0%}"
            if scheme != BSP and correction != "none" and uncorrected is not None and gap
            else "—"
        )
        per_seed = " / ".join(f"{a * 100:.2f}" for a, _ in runs)
        staleness = statistics.mean(s for _, s in runs)
        lines.append(
            f"| {scheme} | {correction} | {mean[(scheme, correction)] * 100:.2f} | {per_seed} "
            f"| {closed} | {staleness:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument(
        "--seeds", type=int, default=3, help="corrections: runs per row (trainer.seed 0..N-1)"
    )
    parser.add_argument(
        "--corrections",
        type=lambda text: text.split(","),
        default=list(CORRECTIONS),
        help=f"corrections: which staleness corrections, comma-separated ({','.join(CORRECTIONS)})",
    )
    parser.add_argument(
        "--dc-lambda",
        type=float,
        action="append",
        help="corrections: a λ for dc (repeat for a row each; default: the option's own)",
    )
    rates = ["20mbit", "1gbit"]
    add_part_arguments(parser, [*rates, "corrections"])
    args = parser.parse_args()
    unknown = sorted(set(args.corrections) - set(CORRECTIONS))
    if unknown or args.seeds < 1:
        parser.error(f"--corrections takes {','.join(CORRECTIONS)}; --seeds at least 1")

    def job(rate: str) -> str:
        return (
            f"{args.workers} workers + 1 parameter server under runner=netem at {rate} per "
            f"link, {args.model} on {args.dataset}, batch 32/worker, {args.epochs} epochs"
        )

    def what(rate: str) -> str:
        return (
            f"{job(rate)}; iteration time: mean of the log windows after step 5 (for asp/ssp, "
            "rank 0's own); accuracy: the final evaluation"
        )

    title = "Parameter-server synchronization (BSP, ASP, SSP, OSP) at {}"
    parts = {
        rate: Part(title.format(rate), lambda r=rate: table(args, r), what(rate)) for rate in rates
    }
    parts["corrections"] = Part(
        f"Staleness corrections for ASP and SSP at {CORRECTIONS_RATE}",
        lambda: corrections_table(args),
        f"{job(CORRECTIONS_RATE)}; final accuracy of trainer.seed 0..{args.seeds - 1}; gap "
        "closed: (corrected − none) / (BSP − none) of the means; applied staleness: updates "
        "the server applied between a gradient's pull and its own, rank 0's, mean of the log "
        "windows",
    )
    run_parts(parser, args, parts, "ps_netem")


if __name__ == "__main__":
    main()
