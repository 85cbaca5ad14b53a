"""The quantizers of issue 5, measured two ways. Run from the repository root:

    .venv/bin/python -m benchmarks.quantizers --write             # both parts
    .venv/bin/python -m benchmarks.quantizers throughput --write  # or one part

* ``throughput``: GB of float32 gradient per second through each quantizer's compress
  (quantize + pack) and decompress (unpack + scale) on one worker, on a real ResNet-18 gradient,
  next to a plain memory copy of the same tensor measured in the same run. TernGrad's raw
  kernels (ternarize + 2-bit pack over the whole flat tensor, and unpack) are timed too.
* ``training``: dense, TernGrad, TernGrad without clipping and TernGrad without scaler sharing
  through the CLI on a dataset with real files (Fashion-MNIST by default), accuracy and bytes.

``--write`` replaces each part's section of BENCHMARKS.md with its table and this command.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
from torch import Tensor

from benchmarks.measure import median_time, model_group, real_gradient, run_job
from benchmarks.report import Part, add_part_arguments, run_parts
from gradsync.compressors.bf16 import BF16Compressor
from gradsync.compressors.bitpack import pack, unpack
from gradsync.compressors.fp16 import FP16Compressor
from gradsync.compressors.powersgd import PowerSGDCompressor
from gradsync.compressors.qsgd import QSGDCompressor
from gradsync.compressors.signsgd import SignSGDCompressor
from gradsync.compressors.ternary import TERNARY_BITS, ternary_codes
from gradsync.compressors.terngrad import TernGradCompressor
from gradsync.types import Compressor, GroupInfo


# ---- throughput ----------------------------------------------------------------------------
def _row(name: str, seconds: float, gigabytes: float, copy: float) -> str:
    return f"| {name} | {seconds * 1e3:.2f} | {gigabytes / seconds:.2f} | {copy / seconds:.3f} |"


def throughput_table(repeats: int) -> str:
    flat, _ = real_gradient("ResNet-18")
    gigabytes = flat.numel() * flat.element_size() / 1e9
    copy_target = torch.empty_like(flat)
    copy = median_time(lambda: copy_target.copy_(flat), repeats)
    lines = [
        "| operation | ms | GB/s of float32 gradient | vs memory copy |",
        "|---|---:|---:|---:|",
        _row("memory copy (ceiling)", copy, gigabytes, copy),
    ]
    # TernGrad's kernels alone, over the whole tensor at one scaler, into reused buffers.
    scaler = flat.abs().max()
    gen = torch.Generator().manual_seed(0)
    draws, values = torch.empty_like(flat), torch.empty_like(flat)
    packed = pack(ternary_codes(flat, scaler, draws.uniform_(generator=gen)), TERNARY_BITS)
    kernels = {
        "uniform draws (the RNG alone)": lambda: draws.uniform_(generator=gen),
        "draws + ternarize + 2-bit pack": lambda: pack(
            ternary_codes(flat, scaler, draws.uniform_(generator=gen)), TERNARY_BITS
        ),
        "2-bit unpack + scale": lambda: (
            values.copy_(unpack(packed, TERNARY_BITS, flat.numel())).sub_(1).mul_(scaler)
        ),
    }
    for name, fn in kernels.items():
        lines.append(_row(name, median_time(fn, repeats), gigabytes, copy))
    compressors: dict[str, Compressor] = {
        "terngrad": TernGradCompressor(),
        "qsgd (127 levels, 8 bits)": QSGDCompressor(),
        "qsgd (7 levels, 4 bits)": QSGDCompressor(levels=7),
        "signsgd": SignSGDCompressor(),
        "fp16": FP16Compressor(),
        "bf16": BF16Compressor(),
        # Every weight as rank-r factors, after its dense steps; alone, its all-reduce of P
        # (inside compress) costs nothing here.
        "powersgd (rank 1)": PowerSGDCompressor(rank=1),
        "powersgd (rank 4)": PowerSGDCompressor(rank=4),
    }
    for name, compressor in compressors.items():
        group = model_group("ResNet-18", step=compressor.steady_step)
        payload, ctx = compressor.compress(flat, group=group)

        def compress(c: Compressor = compressor, g: GroupInfo = group) -> object:
            return c.compress(flat, group=g)

        def decompress(c: Compressor = compressor, p: tuple = payload, x: object = ctx) -> Tensor:
            return c.decompress(p, x)

        lines.append(_row(f"{name}: compress", median_time(compress, repeats), gigabytes, copy))
        lines.append(_row(f"{name}: decompress", median_time(decompress, repeats), gigabytes, copy))
    return "\n".join(lines)


# ---- training ------------------------------------------------------------------------------
VARIANTS = {
    "dense (none)": ["compressor=none"],
    "terngrad": ["compressor=terngrad"],
    "terngrad, clip=0": ["compressor=terngrad", "compressor.clip=0"],
    "terngrad, own scalers": ["compressor=terngrad", "compressor.share_scalers=false"],
}


def _run(overrides: list[str], run_dir: Path) -> dict:
    run_job(overrides, run_dir)
    return json.loads((run_dir / "summary.json").read_text())["final"]


def training_table(common: list[str], workers: list[int]) -> str:
    lines = [
        "| method | workers | accuracy | best accuracy | bytes sent/step/worker "
        "| compression ratio |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    with tempfile.TemporaryDirectory() as root:
        for n in workers:
            for name, overrides in VARIANTS.items():
                run_dir = Path(root) / f"{n}-{len(lines)}"
                final = _run([*overrides, *common, f"trainer.workers={n}"], run_dir)
                lines.append(
                    f"| {name} | {n} | {final['eval/accuracy']:.4f} | "
                    f"{final['eval/best_accuracy']:.4f} | {final['comm/bytes_sent']:,.0f} | "
                    f"{final['comm/compression_ratio']:.2f} |"
                )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_part_arguments(parser, ["throughput", "training"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--train",
        nargs="+",
        default=["dataset=fashion_mnist", "trainer.epochs=2"],
        help="overrides shared by every training run",
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core per worker, as in a job
    parts = {
        "throughput": Part(
            "Quantizers: throughput",
            lambda: throughput_table(args.repeats),
            f"ResNet-18 gradient (CIFAR, 11.2M floats), one worker, one thread, median of "
            f"{args.repeats}",
        ),
        "training": Part(
            "Quantizers: TernGrad training",
            lambda: training_table(args.train, args.workers),
            f"{' '.join(args.train)}, gloo workers on this machine",
        ),
    }
    run_parts(parser, args, parts, "quantizers")


if __name__ == "__main__":
    main()
