"""Writing a benchmark's results into its own section of BENCHMARKS.md."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

BENCHMARKS_MD = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def machine(device: str = "cpu") -> str:
    """Where a table was measured, for the line above it (``cuda``: with the GPU, CUDA and
    NCCL versions)."""
    cpu = platform.processor() or platform.machine()
    host = f"{cpu}, {mp.cpu_count()} cores, torch {torch.__version__}"
    if device != "cuda":
        return host
    nccl = ".".join(str(part) for part in torch.cuda.nccl.version())
    gpu = torch.cuda.get_device_name()
    return f"{torch.cuda.device_count()}x {gpu}, CUDA {torch.version.cuda}, NCCL {nccl}; {host}"


def write_section(key: str, title: str, body: str) -> None:
    """Replace (or append) the section between this benchmark's markers."""
    begin, end = f"<!-- {key}:begin -->", f"<!-- {key}:end -->"
    text = BENCHMARKS_MD.read_text() if BENCHMARKS_MD.exists() else "# Benchmarks\n"
    section = f"{begin}\n{body}\n{end}"
    if begin in text:
        head, rest = text.split(begin, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + f"\n\n## {title}\n\n" + section + "\n"
    BENCHMARKS_MD.write_text(text)


@dataclass(frozen=True)
class Part:
    """One table of a benchmark: its section title, how to make it, and what it measured."""

    title: str
    make: Callable[[], str]
    what: str


def publish(key: str, title: str, body: str, *, write: bool) -> None:
    """Print a benchmark's section; with ``write``, also put it in BENCHMARKS.md."""
    print(body)
    if write:
        write_section(key, title, body)


def add_part_arguments(parser: argparse.ArgumentParser, names: list[str]) -> None:
    parser.add_argument("parts", nargs="*", help=f"any of {', '.join(names)} (default: all)")
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")


def run_parts(
    parser: argparse.ArgumentParser, args: argparse.Namespace, parts: dict[str, Part], module: str
) -> None:
    """Make the chosen parts (all by default), print each, and with ``--write`` put each in
    its section of BENCHMARKS.md under the command that produced it."""
    unknown = sorted(set(args.parts) - set(parts))
    if unknown:
        parser.error(f"unknown part(s) {unknown}; valid: {', '.join(parts)}")
    command = f"`python -m benchmarks.{module} {' '.join(sys.argv[1:])}`"
    for name in args.parts or list(parts):
        part = parts[name]
        body = f"{command} — {part.what}; {machine()}\n\n{part.make()}"
        print(f"## {part.title}\n\n{body}\n")
        if args.write:
            write_section(f"{module}_{name}", part.title, body)
