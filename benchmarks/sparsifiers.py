"""The sparsifiers of issue 4, measured three ways. Run from the repository root:

    .venv/bin/python -m benchmarks.sparsifiers --write            # all three parts
    .venv/bin/python -m benchmarks.sparsifiers selection --write  # or one part

* ``selection``: DEFT's selection time on the slowest worker against one ``torch.topk`` over the
  whole model at the same density, for n = 1..16 workers, on real ResNet-18 and VGG-16 (CIFAR)
  gradients. The n workers' bins are timed one after another in this process, one thread each,
  as each worker would run its own bin.
* ``buildup``: actual density of topk (union), threshold, cltk and deft in real multi-process
  runs through the CLI (digits, CNN) at n = 2, 4, 8 workers.
* ``throughput``: MB of gradient per second through compress + decompress for each
  sparsifier on one worker, next to a plain memory copy of the same data.

``--write`` replaces each part's section of BENCHMARKS.md with its table and this command.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from omegaconf import OmegaConf
from torch import Tensor

from benchmarks.measure import MODELS, median_time, real_gradient
from benchmarks.report import Part, add_part_arguments, run_parts
from gradsync.algorithms.deft_plan import assign_local_k, lpt_bins, partition_layers
from gradsync.compressors.cltk import CLTKCompressor
from gradsync.compressors.deft import DEFTCompressor
from gradsync.compressors.dgc import DGCCompressor
from gradsync.compressors.layer_topk import LayerwiseTopK
from gradsync.compressors.randomk import RandomKCompressor
from gradsync.compressors.selection import range_norms, topk_indices
from gradsync.compressors.sparse import density_k
from gradsync.compressors.threshold import ThresholdCompressor
from gradsync.compressors.topk import TopKCompressor
from gradsync.types import GroupInfo


# ---- selection cost ------------------------------------------------------------------------
def deft_selection_times(
    flat: Tensor, sizes: list[int], density: float, n: int, repeats: int
) -> tuple[float, float]:
    """(slowest bin's top-k time, per-worker planning time: norms + local k + LPT)."""
    ranges = partition_layers(sizes, n)
    lengths = [end - start for start, end in ranges]
    k = density_k(density, flat.numel())

    def plan() -> object:
        ks = assign_local_k(range_norms(flat, ranges), lengths, k)
        return ks, lpt_bins(lengths, ks, n)

    ks, bins = plan()
    planning = median_time(plan, repeats)
    slowest = 0.0
    for layers in bins.bins:
        starts = [ranges[j][0] for j in layers]
        own_lengths, own_ks = [lengths[j] for j in layers], [ks[j] for j in layers]

        def select(
            s: list[int] = starts, m: list[int] = own_lengths, q: list[int] = own_ks
        ) -> object:
            # As a worker does every step: its bin's batched selection, built and run.
            return LayerwiseTopK(s, m, q, numel=flat.numel(), device=flat.device).indices(flat)

        slowest = max(slowest, median_time(select, repeats))
    return slowest, planning


def selection_table(density: float, workers: list[int], repeats: int) -> str:
    lines = [
        "| model | parameters | n | full top-k ms | DEFT slowest bin ms | DEFT planning ms "
        "| speed-up (bin) | speed-up (bin + planning) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in MODELS:
        flat, sizes = real_gradient(name)
        full = median_time(lambda f=flat: topk_indices(f, density_k(density, f.numel())), repeats)
        for n in workers:
            slowest, planning = deft_selection_times(flat, sizes, density, n, repeats)
            with_planning = full / (slowest + planning)
            lines.append(
                f"| {name} | {flat.numel():,} | {n} | {full * 1e3:.1f} | {slowest * 1e3:.1f} | "
                f"{planning * 1e3:.1f} | {full / slowest:.1f}x | {with_planning:.1f}x |"
            )
    return "\n".join(lines)


# ---- build-up ------------------------------------------------------------------------------
BUILDUP_COMPRESSORS = ["topk", "threshold", "cltk", "deft"]


def buildup_table(density: float, workers: list[int], steps: int) -> str:
    with tempfile.TemporaryDirectory() as sweep_dir:
        command = [
            str(Path(sys.executable).parent / "gradsync"),
            "run",
            "-m",
            f"compressor={','.join(BUILDUP_COMPRESSORS)}",
            f"compressor.density={density}",
            f"trainer.workers={','.join(map(str, workers))}",
            f"trainer.max_steps={steps}",
            "trainer.log_every=1",
            f"hydra.sweep.dir={sweep_dir}",
        ]
        subprocess.run(command, check=True, capture_output=True, text=True)
        rows: dict[tuple[str, int], list[float]] = {}
        for job in sorted(Path(sweep_dir).iterdir()):
            if not (job / "config.yaml").exists():
                continue
            cfg = OmegaConf.load(job / "config.yaml")
            option = cfg.compressor._target_.split(".")[2]  # the option is named by its module
            metrics = [json.loads(line) for line in (job / "metrics.jsonl").open()]
            rows[(option, cfg.trainer.workers)] = [
                m["comm/density_actual"] for m in metrics if "comm/density_actual" in m
            ]
    header = "| compressor | " + " | ".join(f"n={n} mean (min–max)" for n in workers) + " |"
    lines = [header, "|---|" + "---:|" * len(workers)]
    for name in BUILDUP_COMPRESSORS:
        cells = []
        for n in workers:
            d = [x / density for x in rows[(name, n)]]
            cells.append(f"{statistics.mean(d):.2f}× ({min(d):.2f}–{max(d):.2f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---- throughput ----------------------------------------------------------------------------
def throughput_table(density: float, repeats: int) -> str:
    flat, sizes = real_gradient("ResNet-18")
    megabytes = flat.numel() * flat.element_size() / 1e6
    compressors = {
        "randomk": RandomKCompressor(density=density),
        "topk (global, union)": TopKCompressor(density=density),
        "topk (layer, allgather)": TopKCompressor(
            density=density, scope="layer", exchange="allgather"
        ),
        "threshold": ThresholdCompressor(density=density),
        "cltk": CLTKCompressor(density=density),
        "deft": DEFTCompressor(density=density),
        # Its u and v carry over between repeats, as between steps of a run.
        "dgc (allgather)": DGCCompressor(density=density),
    }
    copy_target = torch.empty_like(flat)
    copy = median_time(lambda: copy_target.copy_(flat), repeats)
    lines = [
        "| method | ms per compress+decompress | MB/s | vs memory copy |",
        "|---|---:|---:|---:|",
        f"| memory copy (ceiling) | {copy * 1e3:.2f} | {megabytes / copy:,.0f} | 1.00 |",
    ]
    for name, compressor in compressors.items():

        def roundtrip(c=compressor) -> Tensor:
            payload, ctx = c.compress(flat, group=GroupInfo.of_sizes("all", 0, sizes))
            return c.decompress(payload, ctx)

        seconds = median_time(roundtrip, repeats)
        lines.append(
            f"| {name} | {seconds * 1e3:.2f} | {megabytes / seconds:,.0f} | {copy / seconds:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_part_arguments(parser, ["selection", "buildup", "throughput"])
    parser.add_argument("--density", type=float, default=0.01)
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="n for the selection part"
    )
    parser.add_argument("--buildup-workers", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--buildup-steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core per worker, as in a job
    parts = {
        "selection": Part(
            "Sparsifiers: DEFT selection cost vs one full top-k",
            lambda: selection_table(args.density, args.workers, args.repeats),
            f"density {args.density}, one thread, median of {args.repeats}",
        ),
        "buildup": Part(
            "Sparsifiers: actual density (gradient build-up)",
            lambda: buildup_table(args.density, args.buildup_workers, args.buildup_steps),
            f"density {args.density}, digits + CNN, {args.buildup_steps} steps, gloo workers, "
            "actual density ÷ setup density over every step",
        ),
        "throughput": Part(
            "Sparsifiers: compressor throughput",
            lambda: throughput_table(args.density, args.repeats),
            f"ResNet-18 gradient (CIFAR), density {args.density}, one worker, one thread, "
            f"median of {args.repeats}",
        ),
    }
    run_parts(parser, args, parts, "sparsifiers")


if __name__ == "__main__":
    main()
