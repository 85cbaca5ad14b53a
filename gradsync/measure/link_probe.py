"""One worker of the probe that times what the cost model cannot derive: how long a collective
of one element takes on average between this job's workers on their real links (an
all_reduce, all_gather and broadcast), in the three ways a job makes them, and how long the
first collective after a step waits for the slowest worker. The job's own model trains
meanwhile, so the cores are shared as in the job:

* ``calls``: from the training thread, each right after a short stretch of computing, as an
  exchange after backward is made (on oversubscribed cores the workers must first be scheduled
  again: milliseconds with 4 workers on 2 cores);
* ``overlapped_calls``: back to back from a communication thread over a process group of its
  own while the training thread runs forward and backward, as a pipelined scheduler's are;
* ``idle_calls``: the same once no worker computes (a pipelined scheduler's exchanges left
  after backward): on oversubscribed cores, much cheaper than while computing;
* ``busy_link_slowdown``: how many times longer a training step takes while large transfers
  keep a link busy (each link, and both at once when the job has a second) than while the
  links are idle: moving bytes through gloo and the kernel takes its share of the cores;
* ``second_link_mu``: with a second link, how many times longer it takes than the first to
  carry the same large all_reduce (DeFT's μ, measured as DeFT measures it).

Started by ``probe_links`` as one process per worker (inside the job's network namespaces under
runner=netem), with the usual RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT:

    python -m gradsync.measure.link_probe --config JOB.yaml --out RESULT.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

from gradsync.algorithms.simulator import LINK_1, LINK_2, busy_links_key
from gradsync.comm.collective import TorchCollective, second_link_interface
from gradsync.comm.membership import member_group
from gradsync.measure.profile import training_step
from gradsync.schedulers.engine.profiling import samples_within

WARMUP, STEPS, MAX_STEPS = 3, 12, 200  # STEPS of each kind at least
MEASURE_S = 4.0  # a fast model takes more steps, up to about this long
OVERLAPPED_ROUNDS = 4  # of each call per training step
IDLE_ROUNDS = 20  # of each call back to back with no training step
BUSY_S = 0.002  # about one small layer's selection
CHUNK_ELEMENTS = 2**18  # one transfer of the loaded steps: 1 MiB, past any shaper's burst
LOADED_ROUNDS = 2  # of transfers per set of busy links
STEPS_PER_ROUND = 3  # a round's transfers last about this many training steps
MAX_TRANSFERS = 200
CHUNK_SAMPLES = 3  # idle chunk all_reduces timed on each link


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


def _back_to_back(calls: dict[str, Callable[[], object]]) -> dict[str, list[float]]:
    """IDLE_ROUNDS of every call, back to back, while no worker computes."""
    calls["all_reduce"]()  # the workers line up first
    times: dict[str, list[float]] = {op: [] for op in calls}
    for _ in range(IDLE_ROUNDS):
        for op, call in calls.items():
            times[op].append(_timed(call))
    return times


def _chunk_seconds(groups: dict[str, dist.ProcessGroup]) -> dict[str, float]:
    """Median seconds of an all_reduce of CHUNK_ELEMENTS on each idle link, as rank 0 times
    them (every worker gets rank 0's, so all make the same calls after)."""
    chunk = torch.zeros(CHUNK_ELEMENTS)
    medians = []
    for group in groups.values():
        dist.all_reduce(torch.zeros(1), group=group)  # the workers line up first
        times = [_timed(partial(dist.all_reduce, chunk, group=group)) for _ in range(CHUNK_SAMPLES)]
        medians.append(statistics.median(times))
    return dict(zip(groups, _as_rank_0_has(medians, torch.float64), strict=True))


def _transfer_counts(chunk_seconds: dict[str, float], step_s: float) -> dict[str, int]:
    """How many chunk all_reduces on each link last about STEPS_PER_ROUND steps of ``step_s``,
    as rank 0 decides (its own step time; every worker must make the same calls)."""
    counts = [
        min(max(2, math.ceil(STEPS_PER_ROUND * step_s / seconds)), MAX_TRANSFERS)
        for seconds in chunk_seconds.values()
    ]
    return dict(zip(chunk_seconds, _as_rank_0_has(counts, torch.int64), strict=True))


def _as_rank_0_has(values: list, dtype: torch.dtype) -> list:
    """Rank 0's ``values`` on every rank: what decides which calls the workers make must be
    the same everywhere."""
    decided = torch.tensor(values, dtype=dtype)
    dist.broadcast(decided, src=0)
    return decided.tolist()


def _steps_while_transferring(
    groups: dict[str, dist.ProcessGroup], counts: dict[str, int], step: Callable[[], float]
) -> list[float]:
    """Training steps timed while every link of ``groups`` carries ``counts`` large
    all_reduces from a thread of its own; only steps that ended before any link fell idle."""
    chunk = torch.zeros(CHUNK_ELEMENTS)

    def transfer(group: dist.ProcessGroup, count: int) -> None:
        dist.all_reduce(torch.zeros(1), group=group)  # the workers line up first
        for _ in range(count):
            dist.all_reduce(chunk, group=group)

    threads = [
        threading.Thread(target=transfer, args=(group, counts[link]))
        for link, group in groups.items()
    ]
    for thread in threads:
        thread.start()
    loaded = []
    while any(t.is_alive() for t in threads):  # computing until the last transfer ends
        seconds = step()
        if all(t.is_alive() for t in threads):
            loaded.append(seconds)
    for thread in threads:
        thread.join()
    return loaded


def _busy_link_slowdown(
    links: dict[str, dist.ProcessGroup],
    step: Callable[[], float],
    idle_step_s: float,
    chunk_seconds: dict[str, float],
) -> dict[str, float]:
    """Median step time while each link, and every link at once, is busy, over
    ``idle_step_s``: keyed by the busy links' names joined with ``+``."""
    counts = _transfer_counts(chunk_seconds, idle_step_s)
    sets = [[link] for link in links] + ([list(links)] if len(links) > 1 else [])
    slowdown = {}
    for names in sets:
        groups = {name: links[name] for name in names}
        times = []
        for _ in range(LOADED_ROUNDS):
            times += _steps_while_transferring(groups, counts, step)
        if times:  # none when a round's transfers outran one step: nothing to tell
            slowdown[busy_links_key(names)] = max(1.0, statistics.median(times) / idle_step_s)
    return slowdown


def _second_link_mu(chunk_seconds: dict[str, float], start_up: float) -> float | None:
    """How many times longer the second link takes to carry the same bytes (DeFT's μ), as
    measured: the shaped rates' ratio leaves out what else differs between the links."""
    if LINK_2 not in chunk_seconds:
        return None
    fast, slow = (chunk_seconds[link] - start_up for link in (LINK_1, LINK_2))
    return max(1.0, slow / fast) if fast > 0 else None


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

    seconds = _timed(lambda: loss().backward())
    model.zero_grad(set_to_none=True)
    wanted = samples_within(2 * seconds, MEASURE_S, least=STEPS, most=MAX_STEPS)
    return int(_as_rank_0_has([wanted], torch.int64)[0])


def main() -> None:

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    config = OmegaConf.load(args.config)
    assert isinstance(config, DictConfig), "the job's config is a mapping"
    model, loss, _ = training_step(config)
    dist.init_process_group("gloo")
    calls = _one_element_calls(None)
    links = {LINK_1: member_group(dist.new_group(backend="gloo"))}
    overlapped_calls = _one_element_calls(links[LINK_1])
    if second_link_interface() is not None:
        second = TorchCollective(group=None).fork(interface=second_link_interface()).group
        assert second is not None  # fork makes a group of its own
        links[LINK_2] = second

    def step() -> float:
        seconds = _timed(lambda: loss().backward())
        model.zero_grad(set_to_none=True)
        return seconds

    idle_steps: list[float] = []
    first: list[float] = []
    times: dict[str, list[float]] = {op: [] for op in calls}
    overlapped: dict[str, list[float]] = {op: [] for op in calls}
    try:
        for number in range(WARMUP + 2 * _steps(loss, model)):
            # Steps alternate: calls made while computing would also line the workers up,
            # hiding the wait for the slowest.
            if number % 2:
                during = _while_computing(overlapped_calls, lambda: loss().backward())
                model.zero_grad(set_to_none=True)
                if number >= WARMUP:
                    for op, samples in during.items():
                        overlapped[op] += samples
                continue
            idle_step = step()
            waited = _timed(calls["all_reduce"])  # also waits for the slowest worker
            sample = {op: _after_compute(call) for op, call in calls.items()}
            if number >= WARMUP:
                idle_steps.append(idle_step)
                first.append(waited)
                for op, seconds in sample.items():
                    times[op].append(seconds)
        idle = _back_to_back(overlapped_calls)
        chunk_seconds = _chunk_seconds(links)
        slowdown = _busy_link_slowdown(links, step, statistics.median(idle_steps), chunk_seconds)
        if dist.get_rank() == 0:
            # Means, not medians: an exchange costs the sum of its calls, and calls made while
            # the cores are oversubscribed have a long tail (a worker not scheduled for a
            # slice). With 4 workers on 2 cores, all_gathers during backward had a median of
            # 1.9 ms and a mean of 6.5 ms; an exchange of ragged tensors (4 calls) took 25 ms.
            means = {op: statistics.fmean(values) for op, values in times.items()}
            sync = max(statistics.fmean(first) - means["all_reduce"], 0.0)
            result = {
                "sync": sync,
                "calls": means,
                "overlapped_calls": {op: statistics.fmean(v) for op, v in overlapped.items()},
                "idle_calls": {op: statistics.fmean(v) for op, v in idle.items()},
                "busy_link_slowdown": slowdown,
                "second_link_mu": _second_link_mu(
                    chunk_seconds, statistics.median(overlapped["all_reduce"])
                ),
            }
            args.out.write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
