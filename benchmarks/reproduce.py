"""Each paper's headline comparison at small scale, one command per paper, under
``runner=netem`` (real gloo workers in network namespaces on shaped links; needs root):

    .venv/bin/python -m benchmarks.reproduce --write          # all of them (make reproduce)
    .venv/bin/python -m benchmarks.reproduce omgs osp --write # or some of them
    .venv/bin/python -m benchmarks.reproduce --tables-only    # re-read results already there

Every reproduction runs the sweeps of its ``conf/experiment/repro_<name>.yaml`` recipe through
``gradsync run -m`` into ``benchmarks/results/<name>/runs/``, writes ``gradsync report`` into
``benchmarks/results/<name>/report/``, and (with ``--write``) its section of BENCHMARKS.md: the
command, the machine, our numbers beside the paper's, the plot, and for every run the iteration
time that ``gradsync simulate``'s model predicts for it with the error against the measurement.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.report import BENCHMARKS_MD, machine, write_section
from gradsync.cluster.rates import rate_mbit
from gradsync.report.runs import Run, find_runs, override_values

if TYPE_CHECKING:
    from gradsync.projection.estimates import Estimate

REPO = BENCHMARKS_MD.parent
RESULTS = REPO / "benchmarks" / "results"
TOOK_FILE = "took_seconds.txt"
MEASURED_FILE = "measured.json"  # the simulator's inputs, measured right after the runs
EXTRA_FILE = "extra.md"
FASHION_MNIST_PACKAGE = Path("/usr/share/datasets/fashion-mnist")  # Debian dataset-fashion-mnist


@dataclass(frozen=True)
class Sweep:
    folder: str
    overrides: tuple[str, ...]
    """On top of the recipe; comma lists sweep (``gradsync run -m``)."""


@dataclass(frozen=True)
class Reproduction:
    title: str
    recipe: str
    sweeps: tuple[Sweep, ...]
    group_by: str
    """``gradsync report --group-by`` keys."""
    scaled_down: str
    paper: str
    """The paper's own numbers, as markdown."""
    table: Callable[[list[Run], int], str]
    """The section's table from the runs and ``skip_steps``."""
    plot: str
    """The report figure the section shows."""
    skip_steps: int
    """Log windows up to this step are warm-up (or profiling) and left out of timings."""
    extra: Callable[[], str] | None = None
    """A measurement outside the runs (in this process), appended to the section."""
    warmup_steps: int = 0
    """``gradsync simulate --warmup-steps`` for the validation: where its compressors' density
    settles (a threshold's falls as training goes)."""
    device: str = "cpu"
    """cuda: its workers share a GPU; run only when named, on a machine with one, and its
    section shows the simulator's prediction of each run beside it (the validation of the
    simulator, ``validation``, keeps to the CPU runs it was built on)."""


# ---- reading runs ------------------------------------------------------------------------------
def label(run: Run) -> str:
    """The run's own overrides, less the recipe's and Hydra's (``scheduler=omgs
    scheduler.rule=paper``)."""
    values = override_values(run.overrides)
    return " ".join(
        f"{k}={v}" for k, v in values.items() if k != "experiment" and not k.startswith("hydra")
    )


def steady_iteration(run: Run, skip_steps: int) -> float:
    """Mean ``time/iteration`` of the log windows after ``skip_steps`` (warm-up, profiling)."""
    return steady_mean(run, "time/iteration", skip_steps)


def steady_mean(run: Run, key: str, skip_steps: int) -> float:
    """Mean ``key`` of the log windows after ``skip_steps``."""
    windows = [r[key] for r in run.records if key in r]
    steps = [r["step"] for r in run.records if key in r]
    late = [t for t, s in zip(windows, steps, strict=True) if s > skip_steps]
    return statistics.mean(late or windows)


def mean_of(run: Run, key: str, default: float = 0.0) -> float:
    values = run.values(key)
    return statistics.mean(values) if values else default


def final_accuracy(run: Run) -> float:
    accuracies = run.values("eval/accuracy")
    return accuracies[-1] * 100 if accuracies else float("nan")


LATE_EVALUATIONS = 5  # a small test set moves a point or more from one epoch to the next


def late_accuracy(run: Run) -> float:
    """Mean accuracy (%) of the last LATE_EVALUATIONS evaluations."""
    accuracies = run.values("eval/accuracy")[-LATE_EVALUATIONS:]
    return statistics.mean(accuracies) * 100 if accuracies else float("nan")


def by_label(runs: Sequence[Run]) -> dict[str, Run]:
    return {label(run): run for run in runs}


# ---- the reproductions ------------------------------------------------------------------------
SPARSIFIERS = ("none", "topk", "cltk", "threshold", "deft")


# Figure 3 (ResNet-18, 16 GPUs): actual ÷ setup density; the threshold's is not restated.
PAPER_DENSITY = {"none": "1", "topk": "13.59", "cltk": "1.00", "threshold": "–", "deft": "1.00"}


def _deft_table(runs: list[Run], skip: int) -> str:
    lines = [
        "| compressor | workers | actual ÷ setup density (mean) | paper, 16 GPUs "
        "| final accuracy (%) | iteration (ms) | MB sent/step/worker |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for run in sorted(
        runs,
        key=lambda r: (SPARSIFIERS.index(r.setting("compressor")), r.setting("trainer.workers")),
    ):
        density = run.setting("compressor.density") or 1.0
        actual = mean_of(run, "comm/density_actual", 1.0) / density
        lines.append(
            f"| {run.setting('compressor')} | {run.setting('trainer.workers')} "
            f"| {actual:.2f} | {PAPER_DENSITY[run.setting('compressor')]} "
            f"| {final_accuracy(run):.2f} "
            f"| {steady_iteration(run, skip) * 1e3:.1f} "
            f"| {mean_of(run, 'comm/bytes_sent') / 1e6:.3f} |"
        )
    return "\n".join(lines)


def _deft_selection() -> str:
    """DEFT's selection on the slowest worker vs one full top-k, on a real ResNet-18 gradient."""
    from benchmarks.sparsifiers import selection_table

    return (
        "Selection time (in this process, one thread, real ResNet-18 and VGG-16 (CIFAR) "
        "gradients, density 0.01, median of 5):\n\n" + selection_table(0.01, [1, 2, 4, 8, 16], 5)
    )


# ---- DEFT against dense on ResNet-18: each run beside its ideal --------------------------------
DEFT_RESNET18_ORDER = ("none", "topk", "cltk", "deft")
DEFT_RESNET18_NAMES = {"none": "dense", "topk": "Top-k", "cltk": "CLT-k", "deft": "DEFT"}
LINK_MBIT = "runner/link_mbit"  # the shaped rate, logged at step 0
PROBE_MBIT = "runner/probe_mbit"  # what an all-reduce reached on it, logged beside
BUSIEST_WIRE = "comm/bytes_wire_max"
MEAN_WIRE = "comm/bytes_wire"  # runs logged before the busiest link's was


@dataclass(frozen=True)
class Ideal:
    """An iteration's floor: its compute, or the busiest link moving its bytes, whichever is
    longer (nothing else, and the two overlapped perfectly)."""

    compute: float
    """Seconds of the slowest worker's forward + backward."""
    wire_bytes: float
    """Bytes the busiest link carries per step."""
    wire: float
    """Seconds those bytes take at the link's rate."""

    @property
    def iteration(self) -> float:
        return max(self.compute, self.wire)


def ideal_iteration(compute_s: float, wire_bytes: float, link_mbit: float) -> Ideal:
    """max(compute, bytes on the wire ÷ link rate) from a run's own figures."""
    if link_mbit <= 0:
        raise ValueError(f"link rate must be positive, got {link_mbit} Mbit/s")
    return Ideal(compute=compute_s, wire_bytes=wire_bytes, wire=wire_bytes * 8 / (link_mbit * 1e6))


def run_ideal(run: Run, skip: int) -> Ideal:
    """The ideal of a run from its logged steady windows and the shaped link rate."""
    wire_key = BUSIEST_WIRE if run.values(BUSIEST_WIRE) else MEAN_WIRE
    return ideal_iteration(
        steady_mean(run, SLOWEST_COMPUTE, skip),
        steady_mean(run, wire_key, skip),
        run.values(LINK_MBIT)[0],
    )


def _deft_resnet18_table(runs: list[Run], skip: int) -> str:
    named = {r.setting("compressor"): r for r in runs}
    dense = steady_iteration(named["none"], skip)
    probes = sorted({round(v) for r in runs for v in r.values(PROBE_MBIT)})
    lines = [
        "| scheme | iteration (ms) | compute (ms) | MB on the busiest link/step | wire (ms) "
        "| ideal (ms) | ideal ÷ measured | measured ÷ ideal | speed-up vs dense "
        "| actual ÷ setup density | paper: actual ÷ setup density |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for compressor in DEFT_RESNET18_ORDER:
        if compressor not in named:
            continue
        run = named[compressor]
        measured = steady_iteration(run, skip)
        ideal = run_ideal(run, skip)
        density = run.setting("compressor.density") or 1.0
        lines.append(
            f"| {DEFT_RESNET18_NAMES[compressor]} | {measured * 1e3:.0f} "
            f"| {ideal.compute * 1e3:.0f} | {ideal.wire_bytes / 1e6:.2f} "
            f"| {ideal.wire * 1e3:.0f} | {ideal.iteration * 1e3:.0f} "
            f"| {ideal.iteration / measured:.2f} | {measured / ideal.iteration:.2f} "
            f"| {dense / measured:.2f}x "
            f"| {mean_of(run, 'comm/density_actual', 1.0) / density:.2f} "
            f"| {PAPER_DENSITY[compressor]} |"
        )
    notes = (
        "Compute: the slowest worker's forward + backward per step (`time/compute_max`); bytes: "
        "the busiest worker's link per step (`comm/bytes_wire_max`, ring all-reduce "
        "2(n−1)/n·N, all-gather (n−1)·N, a broadcast on its root's link); wire time at the "
        f"shaped rate ({named['none'].values(LINK_MBIT)[0]:g} Mbit/s, `runner.bandwidth`), "
        f"not the probed one (an all-reduce reached {', '.join(map(str, probes))} Mbit/s). "
        "Time breakdown per step (ms, mean worker): "
        + "; ".join(_breakdown(named[c], skip) for c in DEFT_RESNET18_ORDER if c in named)
        + "."
    )
    return "\n".join([*lines, "", notes])


BREAKDOWN = ("forward", "backward", "compress", "comm", "update")


def _breakdown(run: Run, skip: int) -> str:
    parts = ", ".join(
        f"{key} {steady_mean(run, f'time/{key}', skip) * 1e3:.0f}" for key in BREAKDOWN
    )
    return f"{DEFT_RESNET18_NAMES[run.setting('compressor')]}: {parts}"


TERNGRAD_NAMES = {
    "compressor=none": "float (none)",
    "compressor=terngrad": "TernGrad",
    "compressor.clip=0": "TernGrad, no clipping",
}
PAPER_TOP1 = {"float (none)": "57.33", "TernGrad": "57.61", "TernGrad, no clipping": "54.63"}


def _terngrad_table(runs: list[Run], skip: int) -> str:
    lines = [
        "| variant | final accuracy (%) | paper: AlexNet top-1 (%) | MB sent/step/worker "
        "| vs float | iteration (ms) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    named = {TERNGRAD_NAMES.get(label(r).split()[-1], label(r)): r for r in runs}
    dense = mean_of(named["float (none)"], "comm/bytes_sent")
    for name, run in named.items():
        sent = mean_of(run, "comm/bytes_sent")
        lines.append(
            f"| {name} | {final_accuracy(run):.2f} | {PAPER_TOP1.get(name, '–')} "
            f"| {sent / 1e6:.3f} | {dense / sent:.1f}x fewer "
            f"| {steady_iteration(run, skip) * 1e3:.1f} |"
        )
    return "\n".join(lines)


OMGS_NAMES = {
    "scheduler=allreduce": "TopK-SGD",
    "scheduler=lags": "LAGS",
    "scheduler=mgs": "MGS",
    "scheduler=omgs scheduler.rule=paper": "OMGS (paper)",
    "scheduler=omgs scheduler.rule=optimal": "OMGS (optimal)",
}


# Tables V and VI, ResNet-50 on 16 GPUs and 1 GbE: (groups, speed-up over TopK-SGD).
PAPER_OMGS = {
    "TopK-SGD": ("1", "1.00x"),
    "LAGS": ("161", "–"),
    "MGS": ("53", "0.55x"),
    "OMGS (paper)": ("2", "1.31x"),
    "OMGS (optimal)": ("–", "–"),
}


def _omgs_table(runs: list[Run], skip: int) -> str:
    named = {OMGS_NAMES[label(r)]: r for r in runs}
    reference = steady_iteration(named["TopK-SGD"], skip)
    lines = [
        "| scheme | groups | paper: groups | iteration (ms) | speed-up vs TopK-SGD "
        "| paper: speed-up |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in OMGS_NAMES.values():
        run = named[name]
        seconds = steady_iteration(run, skip)
        lines.append(
            f"| {name} | {mean_of(run, 'sched/groups', 1.0):.0f} | {PAPER_OMGS[name][0]} "
            f"| {seconds * 1e3:.0f} | {reference / seconds:.2f}x | {PAPER_OMGS[name][1]} |"
        )
    return "\n".join(lines)


DEFTSCHED_NAMES = {
    "scheduler=wfbp": "WFBP (DDP)",
    "scheduler=bytescheduler": "ByteScheduler",
    "scheduler=usbyte": "US-Byte",
    "scheduler=deft": "DeFT, 1 link",
    "scheduler=deft scheduler.links=2": "DeFT, 2 links",
}


# DeFT's accuracy parity with WFBP: 3 seeds of a CNN on Fashion-MNIST, each correction of
# DeFT's staleness beside WFBP.
PARITY = (
    "model=cnn",
    "dataset=fashion_mnist",
    "trainer.workers=2",
    "trainer.batch_size=32",
    "trainer.max_steps=null",
    "trainer.epochs=3",
    "trainer.log_every=20",
    "runner.bandwidth=1gbit",
    "trainer.seed=0,1,2",
)

# Figure 10 and §V.C (16 A100s, 40 Gbps): DeFT's speed-up over PyTorch DDP across models.
PAPER_DEFT = {"WFBP (DDP)": "1.00x", "DeFT, 2 links": "1.55–2.24x"}


def _deftsched_table(runs: list[Run], skip: int) -> str:
    timed = [r for r in runs if r.setting("dataset") == "synthetic"]
    parity = [r for r in runs if r.setting("dataset") != "synthetic"]
    named = {DEFTSCHED_NAMES[label(r)]: r for r in timed}
    reference = steady_iteration(named["WFBP (DDP)"], skip)
    lines = [
        "| scheme | iteration (ms) | updates/iteration | speed-up vs WFBP | paper |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in DEFTSCHED_NAMES.values():
        run = named[name]
        seconds = steady_iteration(run, skip)
        updates = mean_of(run, "sched/update_applied", 1.0)
        lines.append(
            f"| {name} | {seconds * 1e3:.0f} | {updates:.2f} | {reference / seconds:.2f}x "
            f"| {PAPER_DEFT.get(name, '–')} |"
        )
    return "\n".join([*lines, "", _parity_table(parity)])


def _parity_table(runs: list[Run]) -> str:
    """Final accuracy of WFBP and of DeFT with each staleness correction, per seed and their
    mean (Fashion-MNIST, CNN, 2 workers at 1 Gbit/s, 3 epochs)."""
    by_scheme: dict[str, dict[int, float]] = {}
    for run in runs:
        scheme = str(run.setting("scheduler"))
        correction = run.setting("scheduler.staleness_correction")
        if correction is not None:
            scheme += f", staleness_correction={correction}"
        by_scheme.setdefault(scheme, {})[int(run.setting("trainer.seed"))] = final_accuracy(run)
    seeds = sorted({seed for accuracies in by_scheme.values() for seed in accuracies})
    lines = [
        "Accuracy parity (Fashion-MNIST, CNN, 2 workers at 1 Gbit/s, 3 epochs), final accuracy "
        "(%):",
        "",
        "| scheme | " + " | ".join(f"seed {seed}" for seed in seeds) + " | mean |",
        "|---|" + "---:|" * (len(seeds) + 1),
    ]
    for scheme, accuracies in by_scheme.items():
        cells = [f"{accuracies[seed]:.2f}" if seed in accuracies else "–" for seed in seeds]
        mean = statistics.mean(accuracies.values())
        lines.append(f"| {scheme} | " + " | ".join(cells) + f" | {mean:.2f} |")
    return "\n".join(lines)


# ASP and SSP as their papers apply gradients (their default corrects staleness:
# docs/methods/schedulers/asp.md).
AS_PUBLISHED = "scheduler.staleness_correction=none"
OSP_ORDER = ("ps_bsp", "asp", "ssp", "osp")


def _osp_table(runs: list[Run], skip: int) -> str:
    named = {r.setting("scheduler"): r for r in runs}
    reference = steady_iteration(named["ps_bsp"], skip)
    workers = int(named["ps_bsp"].setting("trainer.workers"))
    batch = int(named["ps_bsp"].setting("trainer.batch_size"))
    lines = [
        "| scheme | iteration (ms) | samples/s | speed-up vs BSP | final accuracy (%) "
        "| unimportant fraction (mean) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in OSP_ORDER:
        run = named[name]
        seconds = steady_iteration(run, skip)
        lines.append(
            f"| {name} | {seconds * 1e3:.1f} | {workers * batch / seconds:.0f} "
            f"| {reference / seconds:.2f}x | {final_accuracy(run):.2f} "
            f"| {mean_of(run, 'sched/unimportant_fraction'):.3f} |"
        )
    return "\n".join(lines)


# OSP's split starts at epoch 2: its budget is 0 in epochs 0 and 1 (SizeSchedule), where it is
# BSP; the 2nd evaluation (the end of epoch 1) is where it may start to differ.
OSP_SPLIT_FROM_EVAL = 2


def split_from_step(run: Run) -> int:
    """The step after which OSP may move layers to the background: that of the run's 2nd
    evaluation (0 when it has fewer)."""
    steps = [r["step"] for r in run.records if "eval/accuracy" in r]
    return steps[OSP_SPLIT_FROM_EVAL - 1] if len(steps) >= OSP_SPLIT_FROM_EVAL else 0


def exchange_seconds(run: Run) -> float:
    """What the server's link needs per BSP step: every worker's push in and its pull out
    (the dense model each), one after the other, at the link's rate."""
    workers = int(run.setting("trainer.workers"))
    model_bytes = mean_of(run, "comm/bytes_sent")
    link_mbit = mean_of(run, "runner/link_mbit") or rate_mbit(str(run.setting("runner.bandwidth")))
    return 2 * workers * model_bytes * 8 / (link_mbit * 1e6)


def _mean_over(runs: Sequence[Run], value: Callable[[Run], float]) -> float:
    return statistics.mean(value(run) for run in runs)


def _osp_balanced_table(runs: list[Run], skip: int) -> str:
    """Per scheme, the mean over seeds of the iteration (after ``skip``, and from OSP's split on),
    throughput, final accuracy (and each seed's), OSP's unimportant share, and the compute and
    exchange time; above, the regime: BSP's compute against what its link needs."""
    by_scheme: dict[str, list[Run]] = {}
    for run in runs:
        by_scheme.setdefault(str(run.setting("scheduler")), []).append(run)
    bsp = by_scheme["ps_bsp"]
    split = max(split_from_step(run) for run in by_scheme.get("osp", bsp))
    workers, batch = (
        int(bsp[0].setting("trainer.workers")),
        int(bsp[0].setting("trainer.batch_size")),
    )
    compute = _mean_over(bsp, lambda r: steady_mean(r, SLOWEST_COMPUTE, skip))
    link = _mean_over(bsp, exchange_seconds)
    exchanged = _mean_over(bsp, lambda r: steady_mean(r, "time/comm", skip))
    reference = _mean_over(bsp, lambda r: steady_iteration(r, skip))
    reference_late = _mean_over(bsp, lambda r: steady_iteration(r, split))
    lines = [
        f"Regime (ps_bsp, mean of {len(bsp)} seeds): forward + backward of the slowest worker "
        f"{compute * 1e3:.1f} ms; the server's link needs {link * 1e3:.1f} ms for "
        f"{workers} pushes in and {workers} pulls out of "
        f"{mean_of(bsp[0], 'comm/bytes_sent') / 1e3:.0f} kB at "
        f"{mean_of(bsp[0], 'runner/link_mbit'):.0f} Mbit/s (BSP's exchange measured "
        f"{exchanged * 1e3:.1f} ms): communication ÷ compute = {link / compute:.2f}. "
        f"OSP is BSP until step {split} (its budget is 0 in epochs 0 and 1).",
        "",
        "| scheme | iteration (ms) | samples/s | speed-up vs BSP | iteration after step "
        f"{split} (ms) | speed-up there | final accuracy (%), mean | per seed "
        f"| last {LATE_EVALUATIONS} evaluations' accuracy (%), mean "
        "| unimportant fraction (mean) | compute, slowest worker (ms) | exchange (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for name in OSP_ORDER:
        chosen = sorted(by_scheme.get(name, []), key=lambda r: int(r.setting("trainer.seed")))
        if not chosen:
            continue
        seconds = _mean_over(chosen, lambda r: steady_iteration(r, skip))
        late = _mean_over(chosen, lambda r: steady_iteration(r, split))
        accuracies = [final_accuracy(r) for r in chosen]
        lines.append(
            f"| {name} | {seconds * 1e3:.1f} | {workers * batch / seconds:.0f} "
            f"| {reference / seconds:.2f}x | {late * 1e3:.1f} | {reference_late / late:.2f}x "
            f"| {statistics.mean(accuracies):.2f} "
            f"| {' / '.join(f'{a:.2f}' for a in accuracies)} "
            f"| {_mean_over(chosen, late_accuracy):.2f} "
            f"| {_mean_over(chosen, lambda r: mean_of(r, 'sched/unimportant_fraction')):.3f} "
            f"| {_mean_over(chosen, lambda r: steady_mean(r, SLOWEST_COMPUTE, skip)) * 1e3:.1f} "
            f"| {_mean_over(chosen, lambda r: steady_mean(r, 'time/comm', skip)) * 1e3:.1f} |"
        )
    return "\n".join(lines)


REPRODUCTIONS: dict[str, Reproduction] = {
    "deft": Reproduction(
        title="DEFT: actual density, selection time and accuracy of the sparsifiers",
        recipe="repro_deft",
        sweeps=(
            Sweep(
                "sparsifiers",
                (
                    f"compressor={','.join(SPARSIFIERS[1:])}",
                    "compressor.density=0.01",
                    "trainer.workers=2,4",
                ),
            ),
            Sweep("dense", ("compressor=none", "trainer.workers=2,4")),
        ),
        group_by="compressor,trainer.workers",
        scaled_down="CNN on Fashion-MNIST (not ResNet-18/CIFAR-10), 2 and 4 workers (not 16), "
        "one epoch, 100 Mbit/s links; selection time on real ResNet-18 and VGG-16 gradients "
        "in one process",
        paper="Top-k's actual density reaches 13.59× the setup density on ResNet-18 (16 GPUs); "
        "DEFT and CLT-k stay at 1×; DEFT's selection speed-up over a full top-k grows "
        "super-linearly with the workers; accuracy about that of dense training",
        table=_deft_table,
        plot="density.png",
        skip_steps=20,
        extra=_deft_selection,
        warmup_steps=100,  # the threshold runs' logged density settles by step 80-100
    ),
    "deft_resnet18": Reproduction(
        title="DEFT against dense on ResNet-18: iteration time beside the ideal",
        recipe="repro_deft_resnet18",
        sweeps=(
            Sweep("dense", ("compressor=none",)),
            Sweep("sparsifiers", ("compressor=topk,cltk,deft", "compressor.density=0.01")),
        ),
        group_by="compressor",
        scaled_down="ResNet-18 on synthetic 32×32 images (not CIFAR-10), batch 8, 4 workers "
        "(not 16 GPUs), 20 steps (timing only: the CNN on Fashion-MNIST above is the accuracy "
        "check), 100 Mbit/s links",
        paper="Figure 7 (ResNet-18, CIFAR-10, 16 GPUs): DEFT's iteration (forward, backward, "
        "selection, communication) is shorter than Top-k's and CLT-k's, mostly by less "
        "selection time, and its communication is lower too; the figure's values are lost in "
        "extraction and no dense iteration time is reported. Figure 3: Top-k's actual density "
        "13.59× the setup, DEFT's and CLT-k's 1×",
        table=_deft_resnet18_table,
        plot="time_breakdown.png",
        skip_steps=8,
    ),
    "terngrad": Reproduction(
        title="TernGrad: bytes and accuracy of float, TernGrad and TernGrad without clipping",
        recipe="repro_terngrad",
        sweeps=(
            Sweep("float_and_terngrad", ("compressor=none,terngrad",)),
            Sweep("no_clipping", ("compressor=terngrad", "compressor.clip=0")),
        ),
        group_by="compressor,compressor.clip",
        scaled_down="CNN on Fashion-MNIST (not AlexNet/ImageNet), 4 workers, 2 epochs, SGD with "
        "momentum, 100 Mbit/s links",
        paper="AlexNet top-1 (Table 2, 2 workers): float 57.33%, TernGrad 57.61%, TernGrad "
        "without clipping 54.63%; TernGrad sends 2 bits per element (16× fewer than float)",
        table=_terngrad_table,
        plot="eval_vs_step.png",
        skip_steps=20,
    ),
    "omgs": Reproduction(
        title="OMGS: iteration time of TopK-SGD, LAGS, MGS and OMGS",
        recipe="repro_omgs",
        sweeps=(
            Sweep("unmerged_and_mgs", ("scheduler=allreduce,lags,mgs",)),
            Sweep("omgs", ("scheduler=omgs", "scheduler.rule=paper,optimal")),
        ),
        group_by="scheduler,scheduler.rule",
        scaled_down="ResNet-18 on synthetic 32×32 images, batch 8, 4 workers (not 16 GPUs), "
        "25 steps, 100 Mbit/s links (not 1 GbE)",
        paper="Table VI (16 GPUs, 1 GbE), ResNet-50: TopK-SGD 0.666 s, MGS 1.217 s, OMGS "
        "0.507 s (1.31× over TopK-SGD); VGG-16: 0.336 / 0.523 / 0.331 s (1.02×)",
        table=_omgs_table,
        plot="time_breakdown.png",
        skip_steps=10,
    ),
    "deftsched": Reproduction(
        title="DeFT: throughput of WFBP, ByteScheduler, US-Byte and DeFT",
        recipe="repro_deftsched",
        sweeps=(
            Sweep("schedulers", ("scheduler=wfbp,bytescheduler,usbyte,deft",)),
            Sweep("two_links", ("scheduler=deft", "scheduler.links=2")),
            Sweep("parity", ("scheduler=wfbp", *PARITY)),
            Sweep(
                "parity_deft",
                ("scheduler=deft", "scheduler.staleness_correction=none,momentum,dc,lr", *PARITY),
            ),
        ),
        group_by="scheduler,scheduler.links,dataset",
        scaled_down="ResNet-18 on synthetic 32×32 images, batch 8, 4 workers (not 16 A100s), "
        "500 + 300 Mbit/s links (not 40 Gbps), 32 steps; parity with a CNN on Fashion-MNIST, "
        "3 epochs",
        paper="Figure 10 (16 A100s, 40 Gbps): DeFT 1.33–2.24× over DDP, ByteScheduler and "
        "US-Byte, e.g. ResNet-101 +33–73%; about no accuracy loss",
        table=_deftsched_table,
        plot="throughput.png",
        skip_steps=12,
    ),
    "osp": Reproduction(
        title="OSP: throughput and accuracy of BSP, ASP, SSP and OSP",
        recipe="repro_osp",
        sweeps=(
            Sweep("parameter_server", ("scheduler=ps_bsp,osp",)),
            Sweep("stale", ("scheduler=asp,ssp", AS_PUBLISHED)),
        ),
        group_by="scheduler",
        scaled_down="CNN on digits (not ResNet-50/CIFAR-10), 4 workers + 1 server (not 8), "
        "10 epochs, 20 Mbit/s links",
        paper="Up to 50% higher throughput than BSP, ASP and R²SP with no accuracy loss "
        "(Fig. 6–7, per-figure numbers lost); ASP has the worst accuracy",
        table=_osp_table,
        plot="eval_vs_time.png",
        skip_steps=5,
    ),
    "osp_balanced": Reproduction(
        title="OSP where compute and communication are of one size: BSP, ASP, SSP and OSP",
        recipe="repro_osp_balanced",
        sweeps=(
            Sweep("parameter_server", ("scheduler=ps_bsp,osp", "trainer.seed=0,1,2")),
            Sweep("stale", ("scheduler=asp,ssp", AS_PUBLISHED, "trainer.seed=0,1,2")),
        ),
        group_by="scheduler",
        scaled_down="a CNN of four 64-channel conv layers on digits (not ResNet-50/CIFAR-10), "
        "4 workers + 1 server (not 8 T4s), batch 64, 20 epochs, 1 Gbit/s links (not 10 Gbps), "
        "chosen so that a worker's forward + backward and the server link's exchange are "
        "within 2× of each other",
        paper="Up to 50% higher throughput than BSP, ASP and R²SP with no accuracy loss "
        "(Fig. 6–7, per-figure numbers lost); ASP has the worst accuracy",
        table=_osp_balanced_table,
        plot="eval_vs_time.png",
        skip_steps=5,
    ),
}


# Two papers' headlines in their regime on one GPU: 4 workers share it behind 1 Gbit/s links.
REPRODUCTIONS["omgs_gpu"] = dataclasses.replace(
    REPRODUCTIONS["omgs"],
    title="OMGS on one GPU behind 1 Gbit/s: TopK-SGD, LAGS, MGS and OMGS",
    recipe="repro_omgs_gpu",
    scaled_down="ResNet-18 on synthetic 32×32 images, batch 32, density 0.01, 4 workers sharing "
    "one GPU over gloo (not 16 GPUs), 40 steps, 1 Gbit/s shaped links (as the paper's 1 GbE)",
    device="cuda",
)
REPRODUCTIONS["deft_gpu"] = dataclasses.replace(
    REPRODUCTIONS["deft_resnet18"],
    title="DEFT against Top-k on one GPU behind 1 Gbit/s: iteration time beside the ideal",
    recipe="repro_deft_gpu",
    scaled_down="ResNet-18 on synthetic 32×32 images (not CIFAR-10), batch 32, 4 workers sharing "
    "one GPU over gloo (not 16 GPUs), 40 steps (timing only), 1 Gbit/s shaped links",
    skip_steps=10,
    device="cuda",
)
ON_CPU = {name: r for name, r in REPRODUCTIONS.items() if r.device == "cpu"}
"""What ``make reproduce`` runs on a machine without a GPU (and the simulator is validated on)."""


# ---- running -----------------------------------------------------------------------------------
def gradsync(*args: str) -> str:
    """A gradsync command as a user types it, its output; a failure stops the reproduction
    with its error output."""
    command = [str(Path(sys.executable).parent / "gradsync"), *args]
    result = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return result.stdout


def ensure_fashion_mnist() -> None:
    """torchvision reads Fashion-MNIST from uncompressed idx files under ``data/``; unpack the
    Debian package's copy there when it is missing (no download is possible offline)."""
    raw = Path(os.environ.get("GRADSYNC_DATA", REPO / "data")) / "FashionMNIST" / "raw"
    names = [
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ]
    if all((raw / n).exists() for n in names):
        return
    if not FASHION_MNIST_PACKAGE.is_dir():
        raise SystemExit(
            f"Fashion-MNIST is not under {raw}: put its four idx files there, or install the "
            "Debian package dataset-fashion-mnist"
        )
    raw.mkdir(parents=True, exist_ok=True)
    for name in names:
        with (
            gzip.open(FASHION_MNIST_PACKAGE / f"{name}.gz") as packed,
            open(raw / name, "wb") as out,
        ):
            shutil.copyfileobj(packed, out)


def run_sweeps(name: str, reproduction: Reproduction, only: Sequence[str] = ()) -> None:
    """Run every sweep (or the sweeps named in ``only``, keeping the others' runs) afresh into
    ``results/<name>/runs/<sweep>``, each with the wall seconds it took."""
    runs_dir = RESULTS / name / "runs"
    if not only:
        shutil.rmtree(runs_dir, ignore_errors=True)
    for sweep in reproduction.sweeps:
        if only and sweep.folder not in only:
            continue
        folder = runs_dir / sweep.folder
        shutil.rmtree(folder, ignore_errors=True)
        start = time.monotonic()
        gradsync(
            "run",
            "-m",
            f"experiment={reproduction.recipe}",
            *sweep.overrides,
            f"hydra.sweep.dir={folder.relative_to(REPO)}",
        )
        (folder / TOOK_FILE).write_text(f"{time.monotonic() - start:.0f}\n")


def took_minutes(name: str) -> float | None:
    """The wall minutes a reproduction's sweeps took, summed (None before any ran)."""
    files = list((RESULTS / name / "runs").glob(f"*/{TOOK_FILE}"))
    if not files and (RESULTS / name / TOOK_FILE).exists():  # written whole, before --sweeps
        files = [RESULTS / name / TOOK_FILE]
    return sum(int(f.read_text()) for f in files) / 60 if files else None


def write_report(name: str, reproduction: Reproduction) -> None:
    results = (RESULTS / name).relative_to(REPO)  # the report quotes its command: no host paths
    gradsync(
        "report",
        str(results / "runs"),
        "--out",
        str(results / "report"),
        "--group-by",
        reproduction.group_by,
    )


def section(name: str, reproduction: Reproduction) -> str:
    runs = find_runs([RESULTS / name / "runs"])
    minutes = took_minutes(name)
    took = f", runs took {minutes:.1f} min" if minutes is not None else ""
    plot = f"benchmarks/results/{name}/report/{reproduction.plot}"
    parts = [
        f"`python -m benchmarks.reproduce {name} --write` (recipe `experiment="
        f"{reproduction.recipe}`; runs and `gradsync report` in `benchmarks/results/{name}/`)"
        f" — {machine()}{took}",
        "",
        f"Scaled down: {reproduction.scaled_down}.",
        "",
        f"Paper: {reproduction.paper}.",
        "",
        reproduction.table(runs, reproduction.skip_steps),
    ]
    extra = RESULTS / name / EXTRA_FILE
    if extra.exists():
        parts += ["", extra.read_text().rstrip()]
    if reproduction.device != "cpu":
        parts += ["", _simulated_beside(name, reproduction)]
    parts += ["", f"![{reproduction.plot}]({plot})"]
    return "\n".join(parts)


def _simulated_beside(name: str, reproduction: Reproduction) -> str:
    """Each run's iteration beside ``gradsync simulate``'s prediction for its own config,
    given the run's own compute (the simulator profiles compute on the host's CPU, which says
    nothing of a GPU's): what the links, the scheduler and the overlap make of it."""
    lines = [
        "`gradsync simulate`'s prediction of each run, from the link probe and wire formats "
        "measured right after the runs and each run's own forward + backward "
        "(`time/compute_max`):",
        "",
        "| run | measured (ms) | predicted (ms) | error |",
        "|---|---:|---:|---:|",
    ]
    for v in _predictions(name, reproduction):
        lines.append(
            f"| {label(v.run) or '(recipe)'} | {v.measured * 1e3:.1f} "
            f"| {v.traced.iteration * 1e3:.1f} | {_error(v.traced.iteration, v.measured):+.1%} |"
        )
    return "\n".join(lines)


# ---- the simulator against the runs, and projected to large clusters --------------------------
VALIDATION_TOLERANCE = 0.20
PROJECTION = (
    "model=resnet50",
    "dataset=synthetic",
    "trainer.batch_size=32",
    "--workers",
    "16,64,256,512",
    "--bandwidths",
    "1gbit,10gbit,100gbit",
)


@dataclass(frozen=True)
class Validated:
    """One run beside ``gradsync simulate``'s predictions for its own config."""

    reproduction: str
    run: Run
    measured: float
    """The run's steady iteration, seconds."""
    traced: Estimate
    """Predicted with the run's own forward + backward, the slowest worker's per step
    (``Predictor.estimate(compute_s=)``)."""
    modelled: Estimate
    """Predicted from the profile taken alone, slowed by the model of the cores' sharing."""
    compute: float
    """The run's slowest worker's forward + backward per iteration, seconds."""
    modelled_compute: float
    """Forward + backward in the modelled prediction (as busy links stretched them)."""


def _predictions(name: str, reproduction: Reproduction) -> list[Validated]:
    """Every run of a reproduction with ``gradsync simulate``'s predictions for its own config.
    The simulator's inputs (profile, wire formats, link probe) come from ``measured.json`` when
    the runs left one; what is missing is measured now, and the file keeps it. What a scheduler
    decided from its own measurements in the run (OMGS's fit, DeFT's capacity scale: its
    registry entry's ``decisions``; DeFT's buckets and the times it solved its knapsacks from:
    its ``plan_reader``) is read from the run's log and directory: on this host those
    decisions vary from run to run."""
    from gradsync.measure.jobs import Predictor
    from gradsync.measure.planning import logged_plan

    predictor = Predictor(warmup_steps=reproduction.warmup_steps)
    store = RESULTS / name / MEASURED_FILE
    if store.exists():
        predictor.load(store)
    validated = []
    for run in find_runs([RESULTS / name / "runs"]):
        scheduler = str(run.setting("scheduler"))
        compute = steady_mean(run, SLOWEST_COMPUTE, reproduction.skip_steps)
        forward = (  # runs logged before it was have the profile's share
            steady_mean(run, SLOWEST_FORWARD, reproduction.skip_steps)
            if run.values(SLOWEST_FORWARD)
            else None
        )
        mean_compute = sum(steady_mean(run, f"time/{k}", reproduction.skip_steps) for k in PASSES)
        estimate = functools.partial(
            predictor.estimate,
            run.config,
            scheduler=scheduler,
            compressor=str(run.setting("compressor")),
            decisions=_decisions(run, scheduler, reproduction.skip_steps),
            logged_plan=logged_plan(run.path, scheduler),
        )
        modelled = estimate(compute_s=None)
        validated.append(
            Validated(
                reproduction=name,
                run=run,
                measured=steady_iteration(run, reproduction.skip_steps),
                traced=estimate(compute_s=compute, forward_s=forward, mean_compute_s=mean_compute),
                modelled=modelled,
                compute=compute,
                modelled_compute=_compute_of(modelled, predictor.compute_seconds(run.config)),
            )
        )
    predictor.save(store)
    return validated


def _decisions(run: Run, scheduler: str, skip_steps: int) -> dict[str, float]:
    """What the scheduler decided in the run, from its log: its registry entry's decisions,
    and OSP's share of the model in the background over the timed windows (its budget grows
    from 0 as the loss falls, so no one step's split stands for the run)."""
    from gradsync.measure.planning import logged_decisions

    decisions = logged_decisions(run.records, scheduler)
    if run.values(UNIMPORTANT_SHARE):
        decisions["unimportant_fraction"] = steady_mean(run, UNIMPORTANT_SHARE, skip_steps)
    return decisions


UNIMPORTANT_SHARE = "sched/unimportant_fraction"


def validation() -> str:
    """Every run of every reproduction: its measured iteration beside what ``gradsync
    simulate``'s model predicts for its own config, from the profile and link probe taken on
    this host right after the runs (``measured.json``; each reproduction takes them): with the
    run's own compute time (trace-driven, the validation's verdict) and with compute modelled."""
    rows = [v for name, r in ON_CPU.items() for v in _predictions(name, r)]
    traced = [_error(v.traced.iteration, v.measured) for v in rows]
    modelled = [_error(v.modelled.iteration, v.measured) for v in rows]
    lines = [
        f"{_within(traced)} of {len(rows)} predictions within {VALIDATION_TOLERANCE:.0%} of the "
        f"measured iteration time (median error {statistics.median(map(abs, traced)):.1%}, "
        f"largest {max(map(abs, traced)):.1%}), given each run's slowest worker's forward + "
        "backward time and its last worker's end of forward. "
        f"With compute modelled too: {_within(modelled)} of {len(rows)} (median "
        f"{statistics.median(map(abs, modelled)):.1%}, largest {max(map(abs, modelled)):.1%}).",
        "",
        "Every reproduction measured the simulator's inputs (profile, wire formats, link probe) "
        "right after its runs (`benchmarks/results/<name>/measured.json`); what a scheduler "
        "decided from measurements inside its run (OMGS's fitted cost model; DeFT's capacity "
        "scale, μ, and the buckets and times it solved its knapsacks from) comes from the run's "
        "log and directory. The simulator is validated as the DeFT and OMGS "
        "papers validate theirs: given the job's own compute time per iteration (the run's "
        "logged forward + backward of the slowest worker each step, `time/compute_max`, "
        "with the forward pass ending when the last worker's did, `time/forward_max`, each "
        "pass spread over the layers as the profile spreads it: every exchange waits for the "
        "last worker to reach it), it predicts the communication and the overlap. How fast "
        "four workers compute on two shared cores depends on how their phases interleave, "
        "which the simulator does not model and no cluster of the projection has; the last "
        "columns show the prediction "
        "when compute too is modelled (the profile taken alone, slowed by "
        "workers × threads / cores), and that compute against the run's.",
        "",
        "| reproduction | run | measured (ms) | predicted (ms) | error | compute modelled: "
        "predicted (ms) | error | compute (slowest worker) → modelled (ms) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for v, error, error_modelled in zip(rows, traced, modelled, strict=True):
        flag = "" if abs(error) <= VALIDATION_TOLERANCE else " **"
        lines.append(
            f"| {v.reproduction} | {label(v.run) or '(recipe)'} | {v.measured * 1e3:.1f} "
            f"| {v.traced.iteration * 1e3:.1f} | {error:+.1%}{flag} "
            f"| {v.modelled.iteration * 1e3:.1f} | {error_modelled:+.1%} "
            f"| {v.compute * 1e3:.1f} → {v.modelled_compute * 1e3:.1f} "
            f"({_error(v.modelled_compute, v.compute):+.0%}) |"
        )
    _draw_validation(rows, RESULTS / "validation.png")
    lines += ["", "![predicted against measured](benchmarks/results/validation.png)"]
    return "\n".join(lines)


def _error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


def _within(errors: list[float]) -> int:
    return sum(abs(e) <= VALIDATION_TOLERANCE for e in errors)


# Per step, the forward + backward of the worker the others waited for, averaged; and the
# latest end of a forward pass.
SLOWEST_COMPUTE = "time/compute_max"
SLOWEST_FORWARD = "time/forward_max"
PASSES = ("forward", "backward")  # the mean worker's, logged


def _compute_of(estimate: Estimate, unslowed: float) -> float:
    """Forward + backward seconds of one iteration in the prediction: as the simulator
    stretched them while links were busy, else as profiled (and slowed by the sharing)."""
    from gradsync.algorithms.simulator import COMPUTE

    if estimate.simulated is None or not estimate.simulated.timeline:
        return unslowed
    span = estimate.simulated.timeline_span or estimate.simulated.iteration
    busy = sum(e.end - e.start for e in estimate.simulated.timeline if e.stream == COMPUTE)
    return busy * estimate.simulated.iteration / span


def _draw_validation(rows: list[Validated], path: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(5.5, 5), layout="constrained")
    ax = figure.subplots()
    for name in REPRODUCTIONS:
        points = [
            (v.measured * 1e3, v.traced.iteration * 1e3) for v in rows if v.reproduction == name
        ]
        if points:
            ax.scatter(*zip(*points, strict=True), label=name)
    values = [x for v in rows for x in (v.measured, v.traced.iteration)]
    low, high = min(values) * 1e3 * 0.7, max(values) * 1e3 * 1.4
    ax.plot([low, high], [low, high], color="black", linewidth=0.8)
    for factor in (1 - VALIDATION_TOLERANCE, 1 + VALIDATION_TOLERANCE):
        ax.plot([low, high], [low * factor, high * factor], color="grey", linestyle="--")
    ax.set(xscale="log", yscale="log", xlabel="measured iteration (ms)")
    ax.set_ylabel("predicted iteration (ms), given the run's compute")
    ax.legend(fontsize=8)
    figure.savefig(path, dpi=110)


# Compute at accelerator speed: the 3.9 s that forward + backward of ResNet-50 (batch 32) take
# on this host become about 0.1 s, roughly one V100 in FP32. An assumed factor, not a
# measurement: no accelerator took part in these runs.
ACCELERATOR_SCALE = "0.025"


def projection() -> str:
    """``gradsync simulate`` on a ResNet-50 profiled here, projected to 16–512 workers: with
    this host's compute, then with compute ACCELERATOR_SCALE times as long."""
    parts = []
    for name, options, what in (
        ("projection", (), "compute as profiled on this host"),
        (
            "projection_accelerated",
            ("--compute-scale", ACCELERATOR_SCALE),
            f"every compute time x{ACCELERATOR_SCALE} (about one V100 in FP32; assumed)",
        ),
    ):
        plot = RESULTS / f"{name}.png"
        command = ["simulate", *PROJECTION, *options, "--plot", str(plot.relative_to(REPO))]
        output = gradsync(*command)
        (RESULTS / f"{name}.txt").write_text(output)
        # The job's own table is in the .txt file; the section shows the projection.
        grid = output[output.index("projected") :].rstrip()
        parts.append(
            f"**{what}**: `gradsync {' '.join(command)}` (full output: "
            f"`benchmarks/results/{name}.txt`)\n\n```\n{grid}\n```\n\n"
            f"![projected speed-up, {what}](benchmarks/results/{name}.png)"
        )
    return "\n\n".join(parts)


STEPS: dict[str, tuple[str, Callable[[], str]]] = {
    "validation": ("Simulator against the reproductions' runs", validation),
    "projection": ("Projected speed-up over dense DDP at 16–512 workers", projection),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "names",
        nargs="*",
        help=f"any of {', '.join([*REPRODUCTIONS, *STEPS])} (default: all but the GPU ones "
        f"({', '.join(sorted(set(REPRODUCTIONS) - set(ON_CPU)))}), in that order)",
    )
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    parser.add_argument(
        "--tables-only", action="store_true", help="re-read the results already there; run nothing"
    )
    parser.add_argument(
        "--sweeps",
        type=lambda text: [s for s in text.split(",") if s],
        default=[],
        help="with one reproduction: re-run only these of its sweeps (comma-separated "
        "folders), keeping the others' runs",
    )
    args = parser.parse_args()
    valid = [*REPRODUCTIONS, *STEPS]
    unknown = sorted(set(args.names) - set(valid))
    if unknown:
        parser.error(f"unknown reproduction(s) {unknown}; valid: {', '.join(valid)}")
    if args.sweeps:
        if len(args.names) != 1 or args.names[0] not in REPRODUCTIONS:
            parser.error("--sweeps takes exactly one reproduction name")
        folders = [sweep.folder for sweep in REPRODUCTIONS[args.names[0]].sweeps]
        if set(args.sweeps) - set(folders):
            parser.error(f"--sweeps: {args.names[0]} has the sweeps {', '.join(folders)}")
    needs_gpu = [n for n in args.names if n in REPRODUCTIONS and REPRODUCTIONS[n].device != "cpu"]
    if needs_gpu and not args.tables_only and not _cuda_available():
        parser.exit(
            2, f"reproduce: a CUDA GPU is needed by {', '.join(needs_gpu)}; torch finds none\n"
        )
    if not args.tables_only:
        ensure_fashion_mnist()
    for name in args.names or [*ON_CPU, *STEPS]:
        if name in STEPS:
            title, make = STEPS[name]
            body = f"`python -m benchmarks.reproduce {name} --write` — {machine()}\n\n{make()}"
            print(f"## {title}\n\n{body}\n", flush=True)
            if args.write:
                write_section(f"reproduce_{name}", title, body)
            continue
        reproduction = REPRODUCTIONS[name]
        if not args.tables_only:
            run_sweeps(name, reproduction, args.sweeps)
            (RESULTS / name / MEASURED_FILE).unlink(missing_ok=True)
            _predictions(name, reproduction)  # the simulator's inputs, on the host of the runs
            write_report(name, reproduction)
            if reproduction.extra is not None:  # measured once, with the runs
                (RESULTS / name / EXTRA_FILE).write_text(reproduction.extra() + "\n")
        body = section(name, reproduction)
        print(f"## {reproduction.title}\n\n{body}\n", flush=True)
        if args.write:
            write_section(f"reproduce_{name}", reproduction.title, body)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    main()
