"""Parameter-server synchronization on a shaped network, in the spirit of the OSP paper's
Figure 6: throughput and accuracy after the same epochs of ps_bsp, asp, ssp and osp, 4 workers
and 1 parameter server under ``runner=netem`` (every process's link shaped, so the server's link
carries the incast of all pushes). Needs root (network namespaces). From the repo root:

    .venv/bin/python -m benchmarks.ps_netem --write
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from benchmarks.measure import run_job
from benchmarks.report import Part, add_part_arguments, run_parts
from gradsync.metrics.summary import read_metrics

SCHEMES = {
    "BSP (ps_bsp)": ["scheduler=ps_bsp"],
    "ASP": ["scheduler=asp"],
    "SSP (s=3)": ["scheduler=ssp"],
    "OSP": ["scheduler=osp"],
}


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


def table(args: argparse.Namespace, bandwidth: str) -> str:
    measured = {}
    with tempfile.TemporaryDirectory() as root:
        for name, overrides in SCHEMES.items():
            folder = "".join(c if c.isalnum() else "_" for c in name)
            run_dir = run_job([*overrides, *_common(args, bandwidth)], Path(root) / folder)
            measured[name] = _measured(run_dir, skip=5)
    reference = measured["BSP (ps_bsp)"][0]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--epochs", type=int, default=10)
    rates = ["20mbit", "1gbit"]
    add_part_arguments(parser, rates)
    args = parser.parse_args()

    def what(rate: str) -> str:
        return (
            f"{args.workers} workers + 1 parameter server under runner=netem at {rate} per "
            f"link, {args.model} on {args.dataset}, batch 32/worker, {args.epochs} epochs; "
            "iteration time: mean of the log windows after step 5 (for asp/ssp, rank 0's "
            "own); accuracy: the final evaluation"
        )

    title = "Parameter-server synchronization (BSP, ASP, SSP, OSP) at {}"
    parts = {
        rate: Part(title.format(rate), lambda r=rate: table(args, r), what(rate)) for rate in rates
    }
    run_parts(parser, args, parts, "ps_netem")


if __name__ == "__main__":
    main()
