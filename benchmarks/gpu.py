"""The GPU check in one command, at most 8 minutes on one GPU. Run from the repository root:

    python -m benchmarks.gpu        # or: make bench-gpu

1. gradsync against the plain PyTorch limits (``gpu_limits``): a bare loop and DDP, ResNet-18
   and ResNet-50, fp32 and bf16, beside a real ``gradsync run`` of each;
2. schedulers × compressors on ResNet-18 (``gpu_matrix``, in this process), and the
   parameter-server schedulers as real runs (``gpu_servers``);
3. the compression kernels on ResNet-18's and ResNet-50's gradients (``gpu_kernels``);
4. with two or more GPUs, the lockstep schedulers again with one worker per GPU over NCCL;
5. ``pytest -m gpu`` in the time left (``gpu_pytest``).

It then writes BENCHMARKS.md's "On one GPU" section: the tables, the GPU, the torch, CUDA and
NCCL versions, and this command. Without CUDA it says so in one line (exit 2) and writes
nothing.

Where the 8 minutes go, on a GPU machine where a ``gradsync run`` spends 15–20 s starting
(Python, CUDA, NCCL): about 10 s of start-up; the limits 15 s in this process and 4 runs,
about 100 s; the matrix about 40 s for 23 combinations in this process (a run each would
take 7 minutes); the servers 4 runs, about 100 s; the kernels about 10 s; the tests whatever
is left (about 3 minutes), stopped at the eighth minute with the summary of what ran.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.gpu_jobs import PRECISIONS, RESNET18, RESNET50, Sizes, Workload, process_group
from benchmarks.gpu_kernels import kernel_rows, kernels_table
from benchmarks.gpu_limits import limit_rows, limits_table
from benchmarks.gpu_matrix import (
    MatrixJob,
    matrix_jobs,
    matrix_on_workers,
    matrix_table,
    measure_matrix,
    on_several_gpus,
)
from benchmarks.gpu_pytest import gpu_tests
from benchmarks.gpu_runs import RunSizes
from benchmarks.gpu_servers import host_limit, server_rows, servers_table
from benchmarks.gpu_tables import one_line
from benchmarks.measure import model_group, real_gradient
from benchmarks.report import machine, publish
from gradsync.jobs.discovery import group_options

COMMAND = "python -m benchmarks.gpu"
KEY, TITLE = "gpu", "On one GPU"
BUDGET_S = 8 * 60.0
WRITING_S = 15.0
"""Kept after the tests for writing the section (and a margin)."""
LEAST_TESTS_S = 30.0
"""With less than this left, the tests are not started."""


@dataclass(frozen=True)
class Plan:
    """What the command measures, and how long each measurement runs."""

    device: torch.device
    limits: tuple[Workload, ...]
    precisions: tuple[str, ...]
    matrix: Workload
    """The job of the matrix and of the parameter servers."""
    kernel_models: tuple[str, ...]
    """Models of ``benchmarks.measure`` whose gradients the kernels compress."""
    limit_sizes: Sizes
    matrix_sizes: Sizes
    run_sizes: RunSizes
    server_run_sizes: RunSizes
    repeats: int


ON_ONE_GPU = Plan(
    device=torch.device("cuda", 0),
    limits=(RESNET18, RESNET50),
    precisions=PRECISIONS,
    matrix=RESNET18,
    kernel_models=("ResNet-18", "ResNet-50"),
    limit_sizes=Sizes(warmup=10, steps=10, rounds=5),
    # The warm-up covers the steps in which schedulers profile and plan, and PowerSGD's
    # dense start.
    matrix_sizes=Sizes(warmup=12, steps=8, rounds=3),
    run_sizes=RunSizes(steps=40, log_every=5),
    server_run_sizes=RunSizes(steps=24, log_every=4),
    repeats=10,
)


def refuse_without_cuda() -> None:
    """One line on stderr and exit 2, before anything is measured or written, where torch
    finds no CUDA GPU."""
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return
    print(
        f"error: {COMMAND} needs a CUDA GPU and torch finds none; run it on a machine with one, "
        "or the CPU benchmarks here: make bench",
        file=sys.stderr,
    )
    raise SystemExit(2)


class Clock:
    """Seconds since the command started, and what is left of its budget."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return BUDGET_S - self.elapsed()

    def say(self, doing: str) -> None:
        print(f"[{self.elapsed():5.0f} s] {doing}", file=sys.stderr, flush=True)


def part(title: str, what: str, table: str) -> str:
    return f"### {title}\n\n{what}\n\n{table}"


def limits_part(plan: Plan, runs: Path) -> str:
    rows = limit_rows(
        plan.limits, plan.precisions, plan.device, plan.limit_sizes, plan.run_sizes, runs
    )
    sizes = plan.limit_sizes
    what = (
        f"{' and '.join(str(w) for w in plan.limits)}: the bare loop and DDP side by side in "
        f"one process (inputs on the device; median of {sizes.rounds} alternating blocks of "
        f"{sizes.steps} steps), then `gradsync run` of the same job (one worker, "
        f"{plan.run_sizes.steps} steps; the median of its log windows after the first two)"
    )
    return part("gradsync against the plain PyTorch limits", what, limits_table(rows))


def matrix_part(plan: Plan, jobs: Sequence[MatrixJob]) -> str:
    sizes = plan.matrix_sizes
    rows = measure_matrix([j for j in jobs if j.in_process], plan.matrix, plan.device, sizes)
    what = (
        f"{plan.matrix}, one worker; every combination in one process, median of "
        f"{sizes.rounds} alternating blocks of {sizes.steps} steps after {sizes.warmup} warm-up "
        "steps; compressors past any density warm-up"
    )
    return part("Schedulers and compressors", what, matrix_table(rows, plan.matrix.batch))


def kernels_part(plan: Plan, options: Sequence[str]) -> str:
    rows = []
    for name in plan.kernel_models:
        gradient, _ = real_gradient(name, plan.device)
        rows += kernel_rows(name, gradient, model_group(name), options, plan.device, plan.repeats)
    what = f"one backward pass's gradient (batch 8), median of {plan.repeats} after a warm-up"
    return part("Compression kernels", what, kernels_table(rows))


def servers_part(plan: Plan, jobs: Sequence[MatrixJob], runs: Path) -> str:
    limit = host_limit(plan.matrix, plan.device, plan.repeats)
    servers = [j for j in jobs if not j.in_process]
    rows = server_rows(servers, plan.matrix, plan.device, plan.server_run_sizes, runs)
    what = (
        f"{plan.matrix}, `gradsync run` with one worker and one server, "
        f"{plan.server_run_sizes.steps} steps; host limit: {limit}"
    )
    return part("Parameter servers with a GPU worker", what, servers_table(rows, limit))


def one_device_parts(plan: Plan, runs: Path, clock: Clock) -> list[str]:
    """Everything but the tests on the plan's one device: the limits, the matrix and the
    kernels on this process's one-rank process group, and the servers' runs."""
    options = group_options()["compressor"]
    jobs = matrix_jobs(options)
    with process_group(plan.device, runs / "store"):
        clock.say("the plain PyTorch limits, and gradsync runs of the same jobs")
        parts = [limits_part(plan, runs)]
        clock.say("schedulers × compressors in this process")
        parts.append(matrix_part(plan, jobs))
        clock.say("compression kernels")
        kernels = kernels_part(plan, options)
    clock.say("parameter servers")
    return [*parts, servers_part(plan, jobs, runs), kernels]


def several_gpus_part(plan: Plan, gpus: int, clock: Clock) -> str:
    clock.say(f"the lockstep schedulers on {gpus} GPUs")
    title = f"Schedulers on {gpus} GPUs"
    what = f"{plan.matrix} per worker, {gpus} workers, one per GPU over NCCL; as above"
    jobs = on_several_gpus(matrix_jobs(group_options()["compressor"]))
    try:
        rows = matrix_on_workers(jobs, plan.matrix, plan.matrix_sizes, gpus, "cuda")
    except RuntimeError as exc:
        return part(title, what, f"Not measured: {one_line(exc)}")
    return part(title, what, matrix_table(rows, plan.matrix.batch * gpus))


def tests_part(clock: Clock) -> str:
    timeout = clock.left() - WRITING_S
    command = '`pytest -m gpu -o addopts=""`'
    if timeout < LEAST_TESTS_S:
        return part("Tests marked gpu", command, f"Not run: {clock.left():.0f} s were left.")
    clock.say(f"pytest -m gpu, for at most {timeout:.0f} s")
    return part("Tests marked gpu", command, str(gpu_tests(timeout)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--no-write", action="store_true", help="print the section, leave BENCHMARKS.md as it is"
    )
    args = parser.parse_args()
    refuse_without_cuda()
    clock = Clock()
    with tempfile.TemporaryDirectory() as runs:
        parts = one_device_parts(ON_ONE_GPU, Path(runs), clock)
    gpus = torch.cuda.device_count()
    if gpus > 1:
        parts.append(several_gpus_part(ON_ONE_GPU, gpus, clock))
    parts.append(tests_part(clock))
    head = f"`{COMMAND}` — {machine('cuda')}; {clock.elapsed():.0f} s in all"
    publish(KEY, TITLE, "\n\n".join([head, *parts]), write=not args.no_write)


if __name__ == "__main__":
    main()
