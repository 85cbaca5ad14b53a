"""What the CPU tests of ``benchmarks.gpu``'s pieces share: a tiny job, a one-rank gloo group
as the command's one GPU has NCCL's, and the cells of the tables they print."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from benchmarks.gpu_jobs import Workload, process_group

TINY = Workload(
    "MLP", "1×4×4 inputs", ("model=mlp", "dataset=synthetic", "dataset.image_shape=[1,4,4]"), 4
)
CPU = torch.device("cpu")


@contextmanager
def one_rank_group(store: Path) -> Iterator[None]:
    """A real one-rank gloo process group, on one thread (the cores are shared)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with process_group(CPU, store):
            yield
    finally:
        torch.set_num_threads(threads)


def table_rows(table: str) -> list[list[str]]:
    """A Markdown table's body, cell by cell."""
    lines = table.splitlines()[2:]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
