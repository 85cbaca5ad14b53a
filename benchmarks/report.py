"""Writing a benchmark's results into its own section of BENCHMARKS.md."""

from __future__ import annotations

import multiprocessing as mp
import platform
from pathlib import Path

import torch

BENCHMARKS_MD = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def machine() -> str:
    """Where a table was measured, for the line above it."""
    cpu = platform.processor() or platform.machine()
    return f"{cpu}, {mp.cpu_count()} cores, torch {torch.__version__}"


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
