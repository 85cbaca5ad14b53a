"""What gradsync's own per-step work costs: every lockstep scheduler against PyTorch DDP on a
model of many tiny layers, where compute is next to nothing and the framework is all there is.

Each scheduler (``compressor=none``, its registry defaults) runs in the same gloo worker
processes as a DDP model given as many buckets as the scheduler has exchanges, each bucket the
same tensors (``bucket_cap_mb_list`` closes DDP's buckets where the scheduler's groups end;
partitions that cut tensors get DDP buckets of their size in whole tensors). The two alternate
in blocks of steps, after warm-up steps in which planning schedulers profile and plan; the
table gives the median step of each and their ratio. The goal: every scheduler within 1.2× of
DDP at the same number of buckets. Run from the repo root:

    .venv/bin/python -m benchmarks.step_overhead --write
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import queue
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from omegaconf import DictConfig
from torch import Tensor, nn

from benchmarks.report import machine, publish
from gradsync.comm.collective import TorchCollective
from gradsync.jobs.compose import compose_jobs
from gradsync.schedulers.engine.buckets import Buckets
from gradsync.schedulers.registry import peer_schedulers
from gradsync.train.build import build_sync
from gradsync.train.timing import make_clock

GOAL = 1.2
"""A scheduler's step may take at most this many times DDP's at the same buckets."""
MIB = 1 << 20


def tiny_layers(layers: int, width: int) -> nn.Module:
    """``layers`` linear layers of ``width`` (weight and bias each: 2 tensors a layer)."""
    torch.manual_seed(0)
    return nn.Sequential(*(m for _ in range(layers) for m in (nn.Linear(width, width), nn.ReLU())))


def ddp_bucket_caps(model: nn.Module, buckets: Buckets) -> list[float]:
    """``bucket_cap_mb_list`` for DDP so that its buckets (filled in backward order, each
    closed once it reaches its cap) end where ``buckets`` end: each cap half a byte under the
    bucket's bytes, so that rounding never closes one a tensor late."""
    element = next(model.parameters()).element_size()
    return [(buckets.numel(b) * element - 0.5) / MIB for b in range(len(buckets))]


def ddp_buckets(model: nn.Module, caps: list[float]) -> int:
    """How many buckets DDP makes of ``model`` under ``caps`` (its own assignment function)."""
    params = [p for p in model.parameters() if p.requires_grad][::-1]
    limits = [int(cap * MIB) for cap in caps]
    assigned, _ = dist._compute_bucket_assignment_by_size(params, limits)
    return len(assigned)


@dataclass(frozen=True)
class Row:
    scheduler: str
    exchanges: int
    ddp_buckets: int
    ours: float
    ddp: float

    @property
    def ratio(self) -> float:
        return self.ours / self.ddp


def _batches(width: int, batch: int, rank: int) -> Iterator[tuple[Tensor, Tensor]]:
    gen = torch.Generator().manual_seed(rank)
    data = [(torch.randn(batch, width, generator=gen), torch.randn(batch, width, generator=gen))]
    while True:
        yield from data


def _timed(step: Callable[[], None], steps: int) -> float:
    """Seconds per step of a block, every worker starting and ending it together."""
    dist.barrier()
    begin = time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    return (time.perf_counter() - begin) / steps


def _measure(cfg: DictConfig, name: str, args: argparse.Namespace, rank: int) -> Row:
    device = torch.device("cpu")
    ours_model = tiny_layers(args.layers, args.width)
    ddp_model = tiny_layers(args.layers, args.width)
    ours_opt = torch.optim.SGD(ours_model.parameters(), lr=0.001)
    sync = build_sync(cfg, collective=TorchCollective(), clock=make_clock(device))
    sync.attach(ours_model, ours_opt)
    data = _batches(args.width, args.batch_size, rank)
    count = [0]

    def ours() -> None:
        x, y = next(data)
        sync.begin(step=count[0])
        loss = nn.functional.mse_loss(ours_model(x), y)
        loss.backward()
        sync.step(step=count[0], loss=loss.detach())
        ours_opt.zero_grad(set_to_none=True)
        count[0] += 1

    _timed(ours, args.warmup)  # planning schedulers profile and plan here
    buckets: Buckets = sync.exchange_buckets()  # type: ignore[attr-defined]
    caps = ddp_bucket_caps(ddp_model, buckets)
    ddp = nn.parallel.DistributedDataParallel(ddp_model, bucket_cap_mb_list=caps)
    ddp_opt = torch.optim.SGD(ddp.parameters(), lr=0.001)

    def theirs() -> None:
        x, y = next(data)
        nn.functional.mse_loss(ddp(x), y).backward()
        ddp_opt.step()
        ddp_opt.zero_grad(set_to_none=True)

    _timed(theirs, args.warmup)
    times: dict[str, list[float]] = {"ours": [], "ddp": []}
    for _ in range(args.rounds):
        times["ours"].append(_timed(ours, args.steps))
        times["ddp"].append(_timed(theirs, args.steps))
    sync.flush()
    sync.close()
    return Row(
        scheduler=name,
        exchanges=len(buckets),
        ddp_buckets=ddp_buckets(ddp_model, caps),
        ours=statistics.median(times["ours"]),
        ddp=statistics.median(times["ddp"]),
    )


def _worker(
    rank: int, world: int, store: str, jobs: dict[str, DictConfig], args: Any, out: Any
) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        rows = [_measure(cfg, name, args, rank) for name, cfg in jobs.items()]
        if rank == 0:
            out.put(rows)
    except BaseException:
        out.put(traceback.format_exc())  # the parent says which rank failed and why
        raise
    finally:
        dist.destroy_process_group()


def _results(procs: list[Any], out: Any) -> list[Row]:
    """Rank 0's rows, or SystemExit naming a rank that failed or died (the others are
    stopped: a rank alone in a collective would wait for ever)."""
    while True:
        try:
            got = out.get(timeout=5)
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if not dead:
                continue
            got = f"a worker exited with code {dead[0].exitcode}"
        if isinstance(got, list):
            return got
        for p in procs:
            p.kill()
        raise SystemExit(f"error: the benchmark's workers failed:\n{got}")


def compose_scheduler(name: str, workers: int) -> DictConfig:
    """``scheduler=name compressor=none`` as ``gradsync run`` composes it (its defaults)."""
    overrides = [f"scheduler={name}", "compressor=none", f"trainer.workers={workers}"]
    return compose_jobs(overrides, multirun=False, launcher_here=False)[0]


def table(rows: list[Row], args: argparse.Namespace, command: str) -> str:
    tensors = 2 * args.layers
    lines = [
        f"`{command}` — {args.workers} gloo workers on one host ({machine()}), an MLP of "
        f"{args.layers} linear layers of width {args.width} ({tensors} tensors), batch "
        f"{args.batch_size}/worker, `compressor=none`; median of {args.rounds} alternating "
        f"blocks of {args.steps} steps after {args.warmup} warm-up steps",
        "",
        "| scheduler | exchanges | DDP buckets | gradsync ms/step | DDP ms/step | gradsync / DDP "
        f"| within {GOAL}× |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        met = "yes" if r.ratio <= GOAL else "no"
        lines.append(
            f"| {r.scheduler} | {r.exchanges} | {r.ddp_buckets} | {r.ours * 1e3:.2f} | "
            f"{r.ddp * 1e3:.2f} | {r.ratio:.2f} | {met} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--layers", type=int, default=51)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20, help="steps per timed block")
    parser.add_argument("--rounds", type=int, default=10, help="alternating blocks per side")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--schedulers", nargs="+", default=None, choices=peer_schedulers())
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args()
    names = args.schedulers or peer_schedulers()
    jobs = {name: compose_scheduler(name, args.workers) for name in names}
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [
            ctx.Process(target=_worker, args=(r, args.workers, f"{tmp}/store", jobs, args, out))
            for r in range(args.workers)
        ]
        for p in procs:
            p.start()
        rows = _results(procs, out)
        for p in procs:
            p.join()
    command = " ".join(["python -m benchmarks.step_overhead", *sys.argv[1:]])
    publish(
        "step_overhead",
        "Per-step overhead on many tiny layers: schedulers against DDP",
        table(rows, args, command),
        write=args.write,
    )


if __name__ == "__main__":
    main()
