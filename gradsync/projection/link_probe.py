"""One worker of the probe that times what the cost model cannot derive: how long a collective
of one element takes between this job's workers on their real links (an all_reduce, all_gather
and broadcast), between training steps of the job's own model so the cores are shared as in
the job, each right after a short stretch of computing as a job makes them (on oversubscribed
cores the workers must first be scheduled again: milliseconds with 4 workers on 2 cores), and
how long the first collective after a step waits for the slowest worker.

Started by ``probe_links`` as one process per worker (inside the job's network namespaces under
runner=netem), with the usual RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT:

    python -m gradsync.projection.link_probe --config JOB.yaml --out RESULT.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import OmegaConf

WARMUP, STEPS = 3, 12
BUSY_S = 0.002  # about one small layer's selection


def _timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _after_compute(call: Callable[[], object]) -> float:
    """One call as a job makes it: right after a short stretch of computing (a compressor
    selecting, a bucket's gradients arriving), so that on oversubscribed cores the workers
    must first be scheduled again. The stretch is short and the same on every worker, so
    waiting for a slower worker stays out of this (``sync`` has it, once per iteration)."""
    work = torch.ones(64, 64)
    until = time.perf_counter() + BUSY_S
    while time.perf_counter() < until:
        work = work @ work / 64
    return _timed(call)


def main() -> None:
    from gradsync.projection.profile import training_step

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    model, loss, _ = training_step(OmegaConf.load(args.config))
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    token = torch.zeros(1)
    gathered = [torch.zeros(1) for _ in range(world)]
    calls = {
        "all_reduce": lambda: dist.all_reduce(token),
        "all_gather": lambda: dist.all_gather(gathered, token),
        "broadcast": lambda: dist.broadcast(token, src=0),
    }
    first: list[float] = []
    times: dict[str, list[float]] = {op: [] for op in calls}
    try:
        for step in range(WARMUP + STEPS):
            loss().backward()
            model.zero_grad(set_to_none=True)
            waited = _timed(calls["all_reduce"])  # also waits for the slowest worker
            sample = {op: _after_compute(call) for op, call in calls.items()}
            if step >= WARMUP:
                first.append(waited)
                for op, seconds in sample.items():
                    times[op].append(seconds)
        if dist.get_rank() == 0:
            medians = {op: statistics.median(values) for op, values in times.items()}
            sync = max(statistics.median(first) - medians["all_reduce"], 0.0)
            args.out.write_text(json.dumps({"sync": sync, "calls": medians}))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
