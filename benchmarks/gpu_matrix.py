"""Schedulers × compressors, in one process: each combination built from its config as
``gradsync run`` composes it (the registry's and the config group's defaults), on the default
process group, with gradsync's model and optimizer and the batch resident on the device; all
timed in alternating blocks of steps, so each is a ratio to the flat all-reduce measured beside
it. Starting a real run per combination costs 15–20 s on a GPU machine; this costs a few.

Which combinations: every scheduler the registry lists (without parameter servers, which need
server processes: ``benchmarks.gpu_servers`` runs those) with ``compressor=none``, against
``scheduler=allreduce compressor=none`` (ByteScheduler's and US-Byte's goal ≥ 0.9), and beside
each, DDP on the same one-rank group with the scheduler's exchanges as its buckets, built once
the scheduler's warm-up has planned them (goal: the scheduler's step at most 1.2× that DDP's);
the pipelined schedulers made for sparsifiers with ``compressor=topk``, against the all-reduce
with top-k (goal ≥ 0.9); the all-reduce with every compressor option, against it with none.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import queue
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from benchmarks.gpu_jobs import (
    Sizes,
    Workload,
    compose_job,
    on_device,
    process_group,
    release,
    resident_training,
)
from benchmarks.gpu_tables import (
    GOAL_HEADER,
    NOT_MEASURED,
    Goal,
    goal_cells,
    markdown_table,
    number,
    reported,
)
from benchmarks.measure import alternating_medians, block_time
from benchmarks.step_overhead import ddp_bucket_caps
from gradsync.comm.collective import TorchCollective
from gradsync.comm.host_sync import take_counts
from gradsync.measure.wire import STEADY_EPOCH
from gradsync.schedulers.registry import SCHEDULERS
from gradsync.train.build import build_sync
from gradsync.train.timing import make_clock
from gradsync.types import SyncModel

REFERENCE = "allreduce"
"""The scheduler every ratio is to: one exchange of the whole gradient after backward."""
DENSE, SPARSE = "none", "topk"
SPARSE_GOAL = Goal(0.9)
PARTITIONING_GOAL = Goal(0.9)
"""ByteScheduler's and US-Byte's: their partitions, credit and deferred updates cost more."""
GOALS = {"bytescheduler": PARTITIONING_GOAL, "usbyte": PARTITIONING_GOAL}
DDP_GOAL = Goal(1.2, at_most=True)
"""A scheduler's step ÷ DDP's with the same buckets (the twin's row)."""
SERVER_GOAL = Goal(1.0, at_most=True)
"""A parameter server's exchange ÷ what the host's loopback allows (``gpu_servers``)."""
WORKER_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class MatrixJob:
    scheduler: str
    compressor: str
    baseline: MatrixJob | None = None
    """The job it is a ratio to (None: it is the reference, or has no ratio)."""
    goal: Goal | None = None
    ddp: bool = False
    """DDP with ``scheduler``'s exchanges as its buckets (its ``baseline``: the scheduler's job,
    so that its ratio is the scheduler's step ÷ DDP's)."""

    @property
    def overrides(self) -> list[str]:
        return [f"scheduler={self.scheduler}", f"compressor={self.compressor}"]

    @property
    def in_process(self) -> bool:
        """Whether this process can run it: no parameter server (they run as processes)."""
        return not SCHEDULERS[self.scheduler].capabilities.parameter_server

    def __str__(self) -> str:
        if self.ddp:
            return f"DDP, {self.scheduler}'s buckets"
        return f"{self.scheduler} + {self.compressor}"


def for_sparsifiers(scheduler: str) -> bool:
    """A scheduler made for sparsifiers: it exchanges during backward, and its payloads need not
    add up (LAGS, MGS, OMGS all-gather what a sparsifier selected)."""
    able = SCHEDULERS[scheduler].capabilities
    return able.overlaps_backward and not able.allreduces


def matrix_jobs(compressors: Sequence[str]) -> list[MatrixJob]:
    """The combinations measured (module text), every registered scheduler among them;
    ``compressors``: the options of the ``compressor`` config group."""
    reference = MatrixJob(REFERENCE, DENSE)
    sparse_reference = MatrixJob(REFERENCE, SPARSE, reference)
    jobs = [reference, MatrixJob(REFERENCE, DENSE, reference, DDP_GOAL, ddp=True)]
    for name, spec in SCHEDULERS.items():
        if spec.capabilities.parameter_server:
            jobs.append(MatrixJob(name, DENSE, goal=SERVER_GOAL))
        elif name != REFERENCE:
            job = MatrixJob(name, DENSE, reference, GOALS.get(name))
            jobs += [job, MatrixJob(name, DENSE, job, DDP_GOAL, ddp=True)]
    jobs += [MatrixJob(REFERENCE, c, reference) for c in compressors if c not in (DENSE, SPARSE)]
    jobs.append(sparse_reference)
    sparse = [name for name in SCHEDULERS if name != REFERENCE and for_sparsifiers(name)]
    jobs += [MatrixJob(name, SPARSE, sparse_reference, SPARSE_GOAL) for name in sparse]
    return jobs


def on_several_gpus(jobs: Sequence[MatrixJob]) -> list[MatrixJob]:
    """The jobs of the matrix with one worker per GPU: the lockstep schedulers, dense and with
    top-k (every compressor again would not fit the command's minutes)."""
    return [job for job in jobs if job.in_process and job.compressor in (DENSE, SPARSE)]


@dataclass(frozen=True)
class MatrixRow:
    job: MatrixJob
    seconds: float | None
    """Median seconds per step (None: it did not run)."""
    host_syncs: dict[str, float]
    """Declared host synchronizations per timed step, by point."""
    error: str | None = None


def _synced_step(
    job: MatrixJob, workload: Workload, device: torch.device, workers: int
) -> tuple[Callable[[], None], SyncModel]:
    """One training step of the job as the loop drives the scheduler (past any density
    warm-up: the compressor as configured), and the scheduler, attached."""
    cfg = compose_job([*workload.overrides, *job.overrides, *on_device(device, workers)])
    training = resident_training(cfg, device)
    sync = build_sync(cfg, collective=TorchCollective(), clock=make_clock(device))
    sync.attach(training.model, training.optimizer)
    steps = itertools.count()

    def step() -> None:
        i = next(steps)
        sync.begin(step=i, epoch=STEADY_EPOCH)
        loss = training.forward_backward()
        sync.step(step=i, epoch=STEADY_EPOCH, loss=loss)
        training.optimizer.zero_grad(set_to_none=True)

    return step, sync


def _ddp_step(
    job: MatrixJob, workload: Workload, device: torch.device, workers: int, planned: SyncModel
) -> Callable[[], None]:
    """A plain step of the job's model under DDP, its buckets the ``planned`` scheduler's
    exchanges (the same tensors each, closed where the scheduler's groups end)."""
    exchanges = getattr(planned, "exchange_buckets", None)
    if exchanges is None:
        raise TypeError(f"{job.scheduler} does not say its exchanges")
    cfg = compose_job([*workload.overrides, *job.overrides, *on_device(device, workers)])
    training = resident_training(cfg, device)
    caps = ddp_bucket_caps(training.model, exchanges())
    ids = [device] if device.type == "cuda" else None
    ddp = DistributedDataParallel(training.model, device_ids=ids, bucket_cap_mb_list=caps)
    return partial(training.step, ddp)


def measure_matrix(
    jobs: Sequence[MatrixJob],
    workload: Workload,
    device: torch.device,
    sizes: Sizes,
    workers: int = 1,
) -> list[MatrixRow]:
    """Each job's median step, side by side. Every worker of the default process group (of
    ``workers``) calls it with the same jobs. A job that cannot be built or fails in its
    warm-up (which also covers the steps in which schedulers profile and plan) is a row with
    its error."""
    steps: dict[MatrixJob, Callable[[], None]] = {}
    syncs: dict[MatrixJob, SyncModel] = {}
    errors: dict[MatrixJob, str] = {}
    for job in jobs:
        try:
            if job.ddp:  # after its scheduler's warm-up, which planned the buckets
                assert job.baseline is not None
                step = _ddp_step(job, workload, device, workers, syncs[job.baseline])
            else:
                step, syncs[job] = _synced_step(job, workload, device, workers)
            block_time(step, sizes.warmup, device)
        except Exception as exc:  # a row that says why, and the others still measured
            errors[job] = reported(exc)  # (a failed scheduler's thread is a daemon: left)
            syncs.pop(job, None)
        else:
            steps[job] = step
    take_counts()  # the warm-ups' host syncs are not a steady step's
    counts: dict[MatrixJob, Counter[str]] = {job: Counter() for job in steps}
    seconds = alternating_medians(
        steps,
        warmup=0,
        rounds=sizes.rounds,
        block=sizes.steps,
        device=device,
        after_block=lambda job: counts[job].update(take_counts()),
    )
    for sync in syncs.values():
        sync.flush()
        sync.close()
    steps.clear()
    syncs.clear()
    release(device)
    timed = sizes.rounds * sizes.steps
    return [
        MatrixRow(
            job,
            seconds.get(job),
            {point: n / timed for point, n in counts.get(job, Counter()).items()},
            errors.get(job),
        )
        for job in jobs
    ]


def ratios(rows: Sequence[MatrixRow]) -> dict[MatrixJob, float | None]:
    """Each row's speed ÷ its baseline's (its baseline's step time ÷ its own)."""
    seconds = {row.job: row.seconds for row in rows}
    result: dict[MatrixJob, float | None] = {}
    for row in rows:
        base = None if row.job.baseline is None else seconds.get(row.job.baseline)
        result[row.job] = None if base is None or row.seconds is None else base / row.seconds
    return result


def _syncs_cell(row: MatrixRow) -> str:
    return ", ".join(f"{point} {n:g}" for point, n in sorted(row.host_syncs.items())) or "0"


def matrix_table(rows: Sequence[MatrixRow], batch: int) -> str:
    """``batch``: samples per step (of every worker together)."""
    with_syncs = any(row.host_syncs for row in rows)
    header = ["scheduler", "compressor", "ms/step", "samples/s", "against", "ratio", *GOAL_HEADER]
    header += ["host syncs/step"] * with_syncs
    lines = []
    ratio = ratios(rows)
    for row in rows:
        job = row.job
        speed = None if row.seconds is None else batch / row.seconds
        base = NOT_MEASURED if job.baseline is None else str(job.baseline)
        if row.error is not None:
            base = f"failed: {row.error}"
        cells = (
            [f"DDP, {job.scheduler}'s buckets", "—"] if job.ddp else [job.scheduler, job.compressor]
        )
        cells += [number(None if row.seconds is None else row.seconds * 1e3), number(speed, 0)]
        cells += [base, *goal_cells(job.goal, ratio[job])]
        lines.append(cells + [_syncs_cell(row)] * with_syncs)
    return markdown_table(header, lines, text_columns=2)


def _matrix_worker(
    rank: int,
    workers: int,
    device_type: str,
    store: str,
    jobs: list[MatrixJob],
    workload: Workload,
    sizes: Sizes,
    out: Any,
) -> None:
    device = torch.device("cuda", rank) if device_type == "cuda" else torch.device("cpu")
    if device_type == "cpu":
        torch.set_num_threads(1)  # workers sharing a host's cores
    with process_group(device, Path(store), rank=rank, world=workers):
        rows = measure_matrix(jobs, workload, device, sizes, workers)
    if rank == 0:
        out.put(rows)


def matrix_on_workers(
    jobs: Sequence[MatrixJob], workload: Workload, sizes: Sizes, workers: int, device_type: str
) -> list[MatrixRow]:
    """``measure_matrix`` with ``workers`` worker processes, one per GPU over NCCL (or gloo
    workers on the CPU); rank 0's rows. RuntimeError when a worker fails."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [
            ctx.Process(
                target=_matrix_worker,
                args=(rank, workers, device_type, f"{tmp}/store", list(jobs), workload, sizes, out),
            )
            for rank in range(workers)
        ]
        for p in procs:
            p.start()
        try:
            return _first_result(out, procs)
        finally:
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()


def _first_result(out: Any, procs: list[Any]) -> list[MatrixRow]:
    deadline = time.monotonic() + WORKER_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            return out.get(timeout=1.0)
        except queue.Empty:
            failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if failed:
                raise RuntimeError(f"a matrix worker failed (exit code {failed[0]})") from None
    raise RuntimeError(f"the matrix workers did not finish in {WORKER_TIMEOUT_S:.0f} s")
