"""Communication schedulers on a shaped network, in the spirit of the DeFT paper's Figure 10:
measured throughput of WFBP (DDP's buckets), ByteScheduler, US-Byte and DeFT over one and two
links, 4 workers under ``runner=netem`` on a bandwidth where communication cannot hide behind
computation (coverage rate > 1), beside what the iteration simulator predicts for each from the
per-bucket times the DeFT runs profiled. Needs root (network namespaces). From the repo root:

    .venv/bin/python -m benchmarks.deft_netem --write
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.measure import add_netem_job_arguments, run_job
from benchmarks.report import Part, add_part_arguments, run_parts
from gradsync.algorithms import simulator
from gradsync.metrics.summary import read_metrics
from gradsync.schedulers.deft.deft import PROFILE_FILE, BucketProfile


@dataclass(frozen=True)
class Scheme:
    overrides: tuple[str, ...]
    schedule: Callable[..., simulator.Prediction]
    """The simulator's schedule, called on the bucket times the DeFT runs profiled."""
    deft: bool = False
    """Predicted with the knapsack scale its Preserver chose in the run."""
    two_links: bool = False
    """Predicted from the 2-link run's profile, with the μ it measured (else the 1-link one's,
    on one link)."""


SCHEMES = {
    "WFBP (DDP)": Scheme(("scheduler=wfbp",), simulator.wfbp),
    "ByteScheduler": Scheme(("scheduler=bytescheduler",), simulator.bytescheduler),
    "US-Byte": Scheme(("scheduler=usbyte",), simulator.usbyte),
    "DeFT, 1 link": Scheme(("scheduler=deft",), simulator.deft, deft=True),
    "DeFT, 2 links": Scheme(
        ("scheduler=deft", "scheduler.links=2"), simulator.deft, deft=True, two_links=True
    ),
}
SKIP_STEPS = 12  # DeFT profiles steps 1-5 and plans after step 5: measure later for all


def _common(args: argparse.Namespace) -> list[str]:
    return [
        "runner=netem",
        f"runner.bandwidth={args.bandwidth}",
        f"runner.second_bandwidth={args.second_bandwidth}",
        f"trainer.workers={args.workers}",
        f"model={args.model}",
        "dataset=synthetic",
        f"trainer.batch_size={args.batch_size}",
        f"trainer.max_steps={args.steps}",
        "trainer.log_every=4",
        "trainer.checkpoint=false",
        "trainer.lr=0.01",  # random labels diverge at the default 0.05, and the Preserver reads
        # its loss model from these steps
    ]


def _measured(run_dir: Path) -> tuple[float, float, float]:
    """(mean time/iteration, mean updates per iteration, DeFT's capacity scale) of the
    windows after SKIP_STEPS."""
    windows = [r for r in read_metrics(run_dir) if "time/iteration" in r and r["step"] > SKIP_STEPS]
    return (
        statistics.mean(r["time/iteration"] for r in windows),
        statistics.mean(r.get("sched/update_applied", 1.0) for r in windows),
        windows[-1].get("sched/capacity_scale", 1.0),
    )


def _predicted(profile: BucketProfile, scheme: Scheme, scale: float) -> simulator.Prediction:
    times = simulator.BucketTimes(profile.forward, profile.backward, profile.comm)
    if scheme.deft:  # with the windows the Preserver chose
        mu = profile.mu if scheme.two_links else None
        return scheme.schedule(times, mu=mu, capacity_scale=scale)
    return scheme.schedule(times)


def table(args: argparse.Namespace) -> str:
    measured: dict[str, tuple[float, float, float]] = {}
    profiles: dict[str, BucketProfile] = {}
    with tempfile.TemporaryDirectory() as root:
        for name, scheme in SCHEMES.items():
            folder = re.sub(r"\W+", "_", name)  # Hydra's override grammar has no spaces
            run_dir = run_job([*scheme.overrides, *_common(args)], Path(root) / folder)
            measured[name] = _measured(run_dir)
            if (run_dir / PROFILE_FILE).exists():
                profiles[name] = BucketProfile.read(run_dir / PROFILE_FILE)
    one_link, two_links = profiles["DeFT, 1 link"], profiles["DeFT, 2 links"]
    samples = args.workers * args.batch_size
    reference = measured["WFBP (DDP)"][0]
    lines = [
        f"DeFT's profile (1 link): {len(one_link.comm)} buckets, coverage rate "
        f"{one_link.coverage_rate:.2f}; measured μ of the second link {two_links.mu:.2f}.",
        "",
        "| scheme | measured iteration (ms) | samples/s | updates/iteration | vs WFBP "
        "| predicted iteration (ms) | predicted samples/s | predicted updates/iteration |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (seconds, updates, scale) in measured.items():
        scheme = SCHEMES[name]
        profile = two_links if scheme.two_links else one_link
        p = _predicted(profile, scheme, scale)
        lines.append(
            f"| {name} | {seconds * 1e3:.0f} | {samples / seconds:.1f} | {updates:.2f} "
            f"| {reference / seconds:.2f}x | {p.iteration * 1e3:.0f} "
            f"| {samples / p.iteration:.1f} | {p.update_frequency:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_netem_job_arguments(parser)
    parser.add_argument("--bandwidth", default="500mbit")
    parser.add_argument("--second-bandwidth", default="300mbit")
    parser.add_argument("--steps", type=int, default=32)
    add_part_arguments(parser, ["schedulers"])
    args = parser.parse_args()
    what = (
        f"{args.workers} workers under runner=netem at {args.bandwidth} (second link "
        f"{args.second_bandwidth}, used by DeFT with 2 links), {args.model} on synthetic "
        f"3x32x32 images, batch {args.batch_size}/worker, dense gradients; measured: mean of the "
        f"log windows after step {SKIP_STEPS} of {args.steps}; predicted: the iteration "
        "simulator on the per-bucket F/B/C that the DeFT runs profiled on the job (the 1-link "
        "profile for all but DeFT with 2 links)"
    )
    parts = {
        "schedulers": Part(
            "Communication schedulers (DeFT) on a shaped network", lambda: table(args), what
        )
    }
    run_parts(parser, args, parts, "deft_netem")


if __name__ == "__main__":
    main()
