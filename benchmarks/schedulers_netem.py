"""Pipelined sparse schedulers on a shaped network, in the spirit of the OMGS paper's Table VI:
measured (and modelled) iteration time of TopK-SGD, LAGS, MGS, OMGS (paper rule) and OMGS
(optimal), 4 workers under ``runner=netem`` at 1 Gbit/s and 100 Mbit/s, a ResNet on synthetic
CIFAR-sized data. Needs root (network namespaces). Run from the repo root:

    .venv/bin/python -m benchmarks.schedulers_netem --write
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
from pathlib import Path

from benchmarks.measure import add_netem_job_arguments, run_job
from benchmarks.report import Part, add_part_arguments, run_parts
from gradsync.metrics.summary import read_metrics

SCHEMES = {
    "TopK-SGD": ["scheduler=allreduce"],
    "LAGS": ["scheduler=lags"],
    "MGS": ["scheduler=mgs"],
    "OMGS (paper)": ["scheduler=omgs", "scheduler.rule=paper"],
    "OMGS (optimal)": ["scheduler=omgs", "scheduler.rule=optimal"],
}
MODELLED_AS = {  # the name each plan has in the OMGS run's log
    "TopK-SGD": "one group (TopK-SGD)",
    "LAGS": "no-merge (LAGS)",
    "MGS": "threshold 8192 (MGS)",
    "OMGS (paper)": "paper",
    "OMGS (optimal)": "optimal",
}
_MODELLED = re.compile(r"omgs: (.+?): (\d+) groups, modelled iteration ([\d.]+) ms")


def _common(args: argparse.Namespace, bandwidth: str) -> list[str]:
    return [
        "runner=netem",
        f"runner.bandwidth={bandwidth}",
        f"trainer.workers={args.workers}",
        f"model={args.model}",
        "dataset=synthetic",
        f"trainer.batch_size={args.batch_size}",
        f"trainer.max_steps={args.steps}",
        "trainer.log_every=5",
        "trainer.checkpoint=false",
        "compressor=topk",
        "compressor.exchange=allgather",
        f"compressor.density={args.density}",
    ]


def _measured(run_dir: Path, skip_steps: int) -> tuple[float, float]:
    """(mean time/iteration, mean sched/groups) of the windows after ``skip_steps``."""
    windows = [r for r in read_metrics(run_dir) if "time/iteration" in r and r["step"] > skip_steps]
    return (
        statistics.mean(r["time/iteration"] for r in windows),
        statistics.mean(r.get("sched/groups", 1.0) for r in windows),
    )


def _modelled(run_dir: Path) -> dict[str, tuple[int, float]]:
    text = (run_dir / "train.log").read_text()
    return {m[1]: (int(m[2]), float(m[3]) / 1e3) for m in _MODELLED.finditer(text)}


def table(args: argparse.Namespace, bandwidth: str) -> str:
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in SCHEMES}
    modelled: dict[str, tuple[int, float]] = {}
    with tempfile.TemporaryDirectory() as root:
        # Rounds of every scheme in turn: what slows the shared host hits them alike.
        for round_ in range(args.repeats):
            for name, overrides in SCHEMES.items():
                folder = re.sub(r"\W+", "_", f"{name} {round_}")  # Hydra's grammar: no spaces
                run_dir = run_job([*overrides, *_common(args, bandwidth)], Path(root) / folder)
                # OMGS profiles steps 1-5 and plans after step 5: measure after step 10 for all.
                runs[name].append(_measured(run_dir, skip_steps=10))
                if round_ == 0:
                    modelled.update(_modelled(run_dir))
    measured = {
        name: (
            statistics.median(seconds for seconds, _ in values),
            statistics.median(groups for _, groups in values),
        )
        for name, values in runs.items()
    }
    reference = measured["TopK-SGD"][0]
    lines = [
        "| scheme | groups | measured iteration (ms) | speed-up vs TopK-SGD "
        "| modelled iteration (ms) | modelled groups |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, (seconds, groups) in measured.items():
        model = modelled.get(MODELLED_AS[name])
        model_text = f"{model[1] * 1e3:.1f} | {model[0]}" if model else "– | –"
        lines.append(
            f"| {name} | {groups:.0f} | {seconds * 1e3:.1f} | {reference / seconds:.2f}x "
            f"| {model_text} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_netem_job_arguments(parser)
    parser.add_argument("--density", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each scheme, in turn")
    add_part_arguments(parser, ["1gbit", "100mbit"])
    args = parser.parse_args()
    what = (
        f"{args.workers} workers under runner=netem, {args.model} on synthetic 3x32x32 images, "
        f"batch {args.batch_size}/worker, top-k density {args.density} (all-gather of values "
        f"and indices), mean of the log windows after step 10 of {args.steps}, median of "
        f"{args.repeats} runs of each scheme taken in turn; modelled: every plan under the cost "
        "model that the first OMGS (optimal) run fitted to its own profiled steps"
    )
    parts = {
        rate: Part(f"Pipelined sparse schedulers at {rate}", lambda r=rate: table(args, r), what)
        for rate in ("1gbit", "100mbit")
    }
    run_parts(parser, args, parts, "schedulers_netem")


if __name__ == "__main__":
    main()
