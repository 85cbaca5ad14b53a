"""The GPU check in one command, at most 8 minutes on one GPU. Run from the repository root:

    python -m benchmarks.gpu                # or: make bench-gpu
    python -m benchmarks.gpu --minutes 20   # a longer budget: more of the tests run
    python -m benchmarks.gpu --tests-only   # only pytest -m gpu, with the whole budget

1. gradsync against the plain PyTorch limits (``gpu_limits``): a bare loop and DDP, ResNet-18
   and ResNet-50, fp32 and bf16, beside a real ``gradsync run`` of each;
2. schedulers × compressors on ResNet-18 (``gpu_matrix``, in this process), and the
   parameter-server schedulers as real runs (``gpu_servers``);
3. the compression kernels on ResNet-18's and ResNet-50's gradients (``gpu_kernels``);
4. with two or more GPUs, the lockstep schedulers again with one worker per GPU over NCCL;
5. ``pytest -m gpu`` in the time left (``gpu_pytest``): every test's outcome, and every
   failure's traceback in full.

Options: ``--minutes N``, the budget (default 8; the tests stop at its end); ``--tests-only``,
only the tests (5.), with the whole budget; ``--results DIR``, where the results are kept
(default ``benchmarks/results/gpu/``); ``--no-write``, BENCHMARKS.md left as it is.

It then writes BENCHMARKS.md's "On one GPU" section (the tables, the GPU, the torch, CUDA and
NCCL versions, and this command; not with ``--tests-only`` or ``--no-write``), and keeps in
the results folder, to be committed with the section (``gpu_results``): the whole log
(``gpu.log``, everything it printed, as it came), the tests' JUnit XML (``tests.xml``) and
every row of every table (``tables.json``). A failed measurement is a table cell of one line;
its traceback is in the log. Without CUDA it says so in one line (exit 2) and writes nothing;
so does a bad option.

Where the 8 minutes go, on a GPU machine where a ``gradsync run`` spends 15–20 s starting
(Python, CUDA, NCCL): about 10 s of start-up; the limits 15 s in this process and 4 runs,
about 100 s; the matrix about 40 s for 23 combinations in this process (a run each would
take 7 minutes); the servers 4 runs, about 100 s; the kernels about 10 s; the tests whatever
is left (about 3 minutes), stopped at the eighth minute with the summary of what ran.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

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
from benchmarks.gpu_pytest import PYTEST, gpu_tests
from benchmarks.gpu_results import (
    JUNIT,
    LOG,
    RESULTS,
    TABLES,
    Table,
    prepared,
    shown,
    tables_json,
    tee_output,
)
from benchmarks.gpu_runs import RunSizes
from benchmarks.gpu_servers import host_limit, server_rows, servers_table
from benchmarks.gpu_tables import reported
from benchmarks.measure import model_group, real_gradient
from benchmarks.report import machine, publish
from gradsync.cli.command import checked
from gradsync.config.checks import Check
from gradsync.jobs.discovery import group_options

COMMAND = "python -m benchmarks.gpu"
KEY, TITLE = "gpu", "On one GPU"
BUDGET_MINUTES = 8.0
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

    def __init__(self, budget_s: float) -> None:
        self.start = time.monotonic()
        self.budget_s = budget_s

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return self.budget_s - self.elapsed()

    def say(self, doing: str) -> None:
        print(f"[{self.elapsed():5.0f} s] {doing}", file=sys.stderr, flush=True)


def limits_part(plan: Plan, runs: Path) -> Table:
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
    title = "gradsync against the plain PyTorch limits"
    return Table("limits", title, what, limits_table(rows), rows)


def matrix_part(plan: Plan, jobs: Sequence[MatrixJob]) -> Table:
    sizes = plan.matrix_sizes
    rows = measure_matrix([j for j in jobs if j.in_process], plan.matrix, plan.device, sizes)
    what = (
        f"{plan.matrix}, one worker; every combination in one process, median of "
        f"{sizes.rounds} alternating blocks of {sizes.steps} steps after {sizes.warmup} warm-up "
        "steps; compressors past any density warm-up"
    )
    table = matrix_table(rows, plan.matrix.batch)
    return Table("matrix", "Schedulers and compressors", what, table, rows)


def kernels_part(plan: Plan, options: Sequence[str]) -> Table:
    rows = []
    for name in plan.kernel_models:
        gradient, _ = real_gradient(name, plan.device)
        rows += kernel_rows(name, gradient, model_group(name), options, plan.device, plan.repeats)
    what = f"one backward pass's gradient (batch 8), median of {plan.repeats} after a warm-up"
    return Table("kernels", "Compression kernels", what, kernels_table(rows), rows)


def servers_part(plan: Plan, jobs: Sequence[MatrixJob], runs: Path) -> Table:
    limit = host_limit(plan.matrix, plan.device, plan.repeats)
    servers = [j for j in jobs if not j.in_process]
    rows = server_rows(servers, plan.matrix, plan.device, plan.server_run_sizes, runs)
    what = (
        f"{plan.matrix}, `gradsync run` with one worker and one server, "
        f"{plan.server_run_sizes.steps} steps; host limit: {limit}"
    )
    title = "Parameter servers with a GPU worker"
    table = servers_table(rows, limit)
    return Table("servers", title, what, table, rows, {"host_limit": limit})


def one_device_parts(plan: Plan, runs: Path, clock: Clock) -> list[Table]:
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


def several_gpus_part(plan: Plan, gpus: int, clock: Clock) -> Table:
    clock.say(f"the lockstep schedulers on {gpus} GPUs")
    title = f"Schedulers on {gpus} GPUs"
    what = f"{plan.matrix} per worker, {gpus} workers, one per GPU over NCCL; as above"
    jobs = on_several_gpus(matrix_jobs(group_options()["compressor"]))
    try:
        rows = matrix_on_workers(jobs, plan.matrix, plan.matrix_sizes, gpus, "cuda")
    except RuntimeError as exc:
        error = reported(exc)
        return Table("several_gpus", title, what, f"Not measured: {error}", (), {"error": error})
    table = matrix_table(rows, plan.matrix.batch * gpus)
    return Table("several_gpus", title, what, table, rows, {"gpus": gpus})


def measurements(plan: Plan, clock: Clock) -> list[Table]:
    """Every table but the tests': on one device, then on each GPU where there are several."""
    with tempfile.TemporaryDirectory() as runs:  # raw runs: not kept
        tables = one_device_parts(plan, Path(runs), clock)
    gpus = torch.cuda.device_count()
    if gpus > 1:
        tables.append(several_gpus_part(plan, gpus, clock))
    return tables


def tests_part(clock: Clock, junit: Path) -> Table:
    """``pytest -m gpu`` in the time left, its JUnit XML written to ``junit``."""
    timeout = clock.left() - WRITING_S
    title, command = "Tests marked gpu", f"`pytest {shlex.join(PYTEST)}`"
    if timeout < LEAST_TESTS_S:
        reason = f"Not run: {clock.left():.0f} s were left."
        return Table("tests", title, command, reason, (), {"not_run": reason})
    clock.say(f"pytest -m gpu, for at most {timeout:.0f} s")
    result = gpu_tests(timeout, junit=junit)
    return Table("tests", title, command, str(result), [result], {"junit": junit.name})


def measured_tables(plan: Plan, clock: Clock, junit: Path, *, tests_only: bool) -> list[Table]:
    """The tables of the plan (only the tests' with ``tests_only``), the tests' last."""
    tables = [] if tests_only else measurements(plan, clock)
    return [*tables, tests_part(clock, junit)]


class OneLineParser(argparse.ArgumentParser):
    """argparse whose mistakes are one line (and exit 2), not its usage text."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {COMMAND}: {message}; see {COMMAND} --help", file=sys.stderr)
        raise SystemExit(2)


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = OneLineParser(prog=COMMAND, description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument(
        "--minutes",
        type=checked(float, Check(above=0), "minutes"),
        default=BUDGET_MINUTES,
        help=f"the budget, the tests stopped at its end (default {BUDGET_MINUTES:g})",
    )
    parser.add_argument(
        "--tests-only",
        action="store_true",
        help="only pytest -m gpu, with the whole budget; BENCHMARKS.md is left as it is",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help=f"the folder of the log, the tests' XML and the tables (default {shown(RESULTS)})",
    )
    parser.add_argument(
        "--no-write", action="store_true", help="print the section, leave BENCHMARKS.md as it is"
    )
    args = parser.parse_args(argv)
    if args.results.exists() and not args.results.is_dir():
        parser.error(f"--results {args.results} is a file, not a folder")
    return args


def keep_in(folder: Path) -> Path:
    """``folder`` ready for this run's results; one line and exit 2 where it cannot be."""
    try:
        return prepared(folder)
    except OSError as exc:
        print(f"error: {COMMAND}: cannot keep the results in {folder}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def section(head: str, results: Path, tables: Sequence[Table]) -> str:
    kept = (
        f"Kept in `{shown(results)}`: the whole log (`{LOG}`), the tests' JUnit XML "
        f"(`{JUNIT}`) and every row of every table (`{TABLES}`)."
    )
    return "\n\n".join([head, kept, *(table.markdown() for table in tables)])


def run(args: argparse.Namespace, command: str, results: Path) -> None:
    """Measure, print the section (and write it, unless told not to) and keep the tables."""
    clock = Clock(args.minutes * 60)
    clock.say(f"{command}: its log, tests' XML and tables kept in {shown(results)}")
    tables = measured_tables(ON_ONE_GPU, clock, results / JUNIT, tests_only=args.tests_only)
    gpu = machine("cuda")
    head = f"`{command}` — {gpu}; {clock.elapsed():.0f} s in all"
    write = not (args.no_write or args.tests_only)
    publish(KEY, TITLE, section(head, results, tables), write=write)
    facts = {"command": command, "machine": gpu, "seconds": round(clock.elapsed(), 1)}
    (results / TABLES).write_text(tables_json(facts, tables))


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    refuse_without_cuda()
    results = keep_in(args.results)
    command = shlex.join([*COMMAND.split(), *(sys.argv[1:] if argv is None else argv)])
    with tee_output(results / LOG):
        try:
            run(args, command, results)
        except Exception:
            traceback.print_exc()  # while the log still takes it
            raise SystemExit(1) from None


if __name__ == "__main__":
    main()
