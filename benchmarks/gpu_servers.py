"""The parameter-server schedulers with a GPU worker, as real ``gradsync run`` jobs (their
servers are processes of their own). A worker's exchange per step (``time/comm``: the gradient
pushed, the parameters pulled) against what the host allows: twice the gradient's bytes over
the host's loopback at the rate gloo reaches here (the servers talk over gloo on the host),
plus the server's update (the job's optimizer on one flat tensor on the CPU, as a server holds
its shard). Goal: the exchange at most that (ratio ≤ 1)."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import DictConfig
from torch import nn

from benchmarks.gpu_jobs import Workload, compose_job, on_device, trainable_elements
from benchmarks.gpu_matrix import MatrixJob
from benchmarks.gpu_runs import RunResult, RunSizes, measured_run
from benchmarks.gpu_tables import GOAL_HEADER, goal_cells, markdown_table, number
from benchmarks.measure import median_time
from gradsync.train.build import build_optimizer

GRADIENT_ELEMENT_BYTES = 4  # float32: bf16 autocast leaves gradients in float32 too
LOOPBACK_TIMEOUT = timedelta(seconds=60)


def loopback_rate(nbytes: int, repeats: int) -> float:
    """Bytes per second gloo carries from one rank to another over this host's loopback: two
    ranks in two threads of this process, ``nbytes`` sent at once, the median of ``repeats``
    sends after a warm-up, each started by both ranks together."""
    store = dist.HashStore()
    together = threading.Barrier(2)
    seconds: list[float] = []
    failures: list[BaseException] = []

    def rank(index: int) -> None:
        try:
            group = dist.ProcessGroupGloo(store, index, 2, LOOPBACK_TIMEOUT)
            buffer = torch.zeros(max(1, nbytes // 4))
            for tag in range(repeats + 1):
                together.wait()
                start = time.perf_counter()
                if index == 0:
                    group.send([buffer], 1, tag).wait()
                else:
                    group.recv([buffer], 0, tag).wait()
                    seconds.append(time.perf_counter() - start)
        except BaseException as exc:  # raised in the caller's thread below
            together.abort()
            failures.append(exc)

    threads = [threading.Thread(target=rank, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return nbytes / statistics.median(seconds[1:])


def server_update_s(cfg: DictConfig, elements: int, repeats: int) -> float:
    """Seconds of one update by the job's optimizer of a flat CPU tensor of ``elements``."""
    shard = nn.ParameterList([nn.Parameter(torch.zeros(elements))])
    shard[0].grad = torch.ones(elements)
    optimizer = build_optimizer(cfg, shard)
    return median_time(optimizer.step, repeats)


@dataclass(frozen=True)
class HostLimit:
    """What a step's exchange with a server on this host needs at the least."""

    gradient_bytes: int
    loopback_bytes_per_s: float
    update_s: float

    @property
    def seconds(self) -> float:
        return 2 * self.gradient_bytes / self.loopback_bytes_per_s + self.update_s

    def __str__(self) -> str:
        return (
            f"2 × {self.gradient_bytes / 1e6:.1f} MB of gradient and parameters at the "
            f"{self.loopback_bytes_per_s / 1e9:.2f} GB/s gloo reaches over loopback, plus "
            f"{self.update_s * 1e3:.2f} ms of the server's update: {self.seconds * 1e3:.2f} ms"
        )


@dataclass(frozen=True)
class ServerRow:
    job: MatrixJob
    run: RunResult

    def exchange_s(self) -> float | None:
        steady = self.run.steady
        return None if steady is None else steady.seconds.get("comm")


def host_limit(workload: Workload, device: torch.device, repeats: int) -> HostLimit:
    """The least exchange per step of ``workload``'s job with a server on this host."""
    cfg = compose_job([*workload.overrides, *on_device(device)])
    elements = trainable_elements(cfg)
    nbytes = elements * GRADIENT_ELEMENT_BYTES
    return HostLimit(
        nbytes, loopback_rate(nbytes, repeats), server_update_s(cfg, elements, repeats)
    )


def server_rows(
    jobs: Sequence[MatrixJob],
    workload: Workload,
    device: torch.device,
    sizes: RunSizes,
    runs: Path,
) -> list[ServerRow]:
    """Each job as a real run of ``workload`` with one worker on ``device`` (in a directory
    under ``runs``)."""
    return [
        ServerRow(
            job,
            measured_run(
                [*workload.overrides, *job.overrides, *on_device(device)],
                sizes,
                runs / f"{job.scheduler}-{job.compressor}",
            ),
        )
        for job in jobs
    ]


def servers_table(rows: Sequence[ServerRow], limit: HostLimit) -> str:
    header = ["scheduler", "compressor", "samples/s", "exchange ms/step", "host limit ms"]
    header += ["exchange ÷ limit", *GOAL_HEADER]
    lines = []
    for row in rows:
        steady, exchange = row.run.steady, row.exchange_s()
        ratio = None if exchange is None else exchange / limit.seconds
        cells = [row.job.scheduler, row.job.compressor]
        cells.append(row.run.error or number(None if steady is None else steady.samples_per_s, 0))
        cells += [number(None if exchange is None else exchange * 1e3), number(limit.seconds * 1e3)]
        lines.append([*cells, *goal_cells(row.job.goal, ratio)])
    return markdown_table(header, lines, text_columns=2)
