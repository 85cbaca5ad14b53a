"""One worker of the probe that times what the cost model cannot derive: how long a collective
of one element takes between this job's workers on their real links (an all_reduce, all_gather
and broadcast), in the two ways a job makes them, and how long the first collective after a
step waits for the slowest worker. The job's own model trains meanwhile, so the cores are
shared as in the job:

* ``calls``: from the training thread, each right after a short stretch of computing, as an
  exchange after backward is made (on oversubscribed cores the workers must first be scheduled
  again: milliseconds with 4 workers on 2 cores);
* ``overlapped_calls``: back to back from a communication thread over a process group of its
  own while the training thread runs forward and backward, as a pipelined scheduler's are.

Started by ``probe_links`` as one process per worker (inside the job's network namespaces under
runner=netem), with the usual RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT:

    python -m gradsync.projection.link_probe --config JOB.yaml --out RESULT.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import OmegaConf

WARMUP, STEPS, MAX_STEPS = 3, 8, 200  # STEPS of each kind at least
MEASURE_S = 4.0  # a fast model takes more steps, up to about this long
OVERLAPPED_ROUNDS = 4  # of each call per training step
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


def _while_computing(
    calls: dict[str, Callable[[], object]], compute: Callable[[], object]
) -> dict[str, list[float]]:
    """OVERLAPPED_ROUNDS of every call from another thread while ``compute`` runs here; the
    times of those that started before it ended (all of them when none did: a model too
    small to overlap anything). Every worker makes the same calls, whatever it keeps."""
    done = threading.Event()
    times: dict[str, list[tuple[float, bool]]] = {op: [] for op in calls}

    def communicate() -> None:
        calls["all_reduce"]()  # the workers line up first: waiting for the slowest is ``sync``
        for _ in range(OVERLAPPED_ROUNDS):
            for op, call in calls.items():
                overlapped = not done.is_set()
                times[op].append((_timed(call), overlapped))

    thread = threading.Thread(target=communicate)
    thread.start()
    compute()
    done.set()
    thread.join()
    return {
        op: [t for t, overlapped in samples if overlapped] or [t for t, _ in samples]
        for op, samples in times.items()
    }


def _one_element_calls(group: dist.ProcessGroup | None) -> dict[str, Callable[[], object]]:
    world = dist.get_world_size()
    token = torch.zeros(1)
    gathered = [torch.zeros(1) for _ in range(world)]
    return {
        "all_reduce": lambda: dist.all_reduce(token, group=group),
        "all_gather": lambda: dist.all_gather(gathered, token, group=group),
        "broadcast": lambda: dist.broadcast(token, src=0, group=group),
    }


def _steps(loss: Callable[[], torch.Tensor], model: torch.nn.Module) -> int:
    """Steps of each kind: STEPS, or more for a fast model, up to MEASURE_S of them (as rank
    0 times one step; every worker must make the same calls)."""
    from gradsync.sync.profiling import samples_within

    seconds = _timed(lambda: loss().backward())
    model.zero_grad(set_to_none=True)
    count = torch.tensor([samples_within(2 * seconds, MEASURE_S, least=STEPS, most=MAX_STEPS)])
    dist.broadcast(count, src=0)
    return int(count.item())


def main() -> None:
    from gradsync.projection.profile import training_step

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    model, loss, _ = training_step(OmegaConf.load(args.config))
    dist.init_process_group("gloo")
    calls = _one_element_calls(None)
    overlapped_calls = _one_element_calls(dist.new_group(backend="gloo"))
    first: list[float] = []
    times: dict[str, list[float]] = {op: [] for op in calls}
    overlapped: dict[str, list[float]] = {op: [] for op in calls}
    try:
        for step in range(WARMUP + 2 * _steps(loss, model)):
            # Steps alternate: calls made while computing would also line the workers up,
            # hiding the wait for the slowest.
            if step % 2:
                during = _while_computing(overlapped_calls, lambda: loss().backward())
                model.zero_grad(set_to_none=True)
                if step >= WARMUP:
                    for op, seconds in during.items():
                        overlapped[op] += seconds
                continue
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
            result = {
                "sync": sync,
                "calls": medians,
                "overlapped_calls": {op: statistics.median(v) for op, v in overlapped.items()},
            }
            args.out.write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
