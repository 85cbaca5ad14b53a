"""The parameter servers' exchange on this host's CPU: a worker's ``sync.step`` (its push, the
server's update, the pull and the copy into its parameters) under ps_bsp, asp, ssp and osp
(``compressor=none``, the schedulers' defaults), on gloo ranks of this host (``--workers``
workers and one server with ``--server-threads`` threads), against what the host allows
(``gpu_servers.HostLimit``: the gradient and the parameters once each over loopback at the rate
gloo reaches here, plus the server's update by the job's optimizer). The model is ResNet-18 at
CIFAR size (11.2 M parameters, 45 MB); its gradients are random and set once, so the steps time
only the exchange. Run from the repo root (``--write`` puts the table in BENCHMARKS.md):

    .venv/bin/python -m benchmarks.ps_exchange --steps 8
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
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from omegaconf import DictConfig

from benchmarks.gpu_servers import GRADIENT_ELEMENT_BYTES, HostLimit, loopback_rate, server_update_s
from benchmarks.measure import MODELS
from benchmarks.report import machine, publish
from gradsync.comm.collective import TorchCollective
from gradsync.jobs.compose import compose_jobs
from gradsync.schedulers.ps.groups import make_groups
from gradsync.train.build import build_sync
from gradsync.train.servers import serve

MODEL = "ResNet-18"
SCHEDULERS = ("ps_bsp", "asp", "ssp", "osp")
TIMEOUT = timedelta(seconds=120)


def compose(scheduler: str, workers: int) -> DictConfig:
    """``scheduler=... compressor=none`` as ``gradsync run`` composes it, with one server."""
    overrides = [f"scheduler={scheduler}", "compressor=none", f"trainer.workers={workers}"]
    return compose_jobs(overrides, multirun=False, launcher_here=False)[0]


def _exchanges(rank: int, cfg: DictConfig, group: Any, args: argparse.Namespace) -> list[float]:
    """Seconds of each of this worker's timed steps (nothing on the server)."""
    steps = args.warmup + args.steps
    torch.manual_seed(0)
    model = MODELS[MODEL]()
    workers = int(cfg.trainer.workers)
    if rank == workers:
        serve(cfg, model, server=0, steps_per_epoch=steps, total_steps=steps)
        return []
    sync = build_sync(cfg, collective=TorchCollective(group=group), clock=time.perf_counter)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # the server steps its own
    sync.attach(model, optimizer)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    loss = torch.ones(())  # osp's server plans its epochs by the workers' loss
    seconds = []
    for step in range(steps):
        sync.begin(step=step)
        start = time.perf_counter()
        sync.step(step=step, loss=loss)
        seconds.append(time.perf_counter() - start)
    sync.flush()
    sync.close()
    return seconds[args.warmup :]


def _rank(rank: int, world: int, store: str, args: argparse.Namespace, out: Any) -> None:
    workers = world - 1
    torch.set_num_threads(args.server_threads if rank == workers else 1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        group = make_groups(workers, TIMEOUT)
        medians = {}
        for name in args.schedulers:
            seconds = _exchanges(rank, compose(name, workers), group, args)
            if seconds:
                medians[name] = statistics.median(seconds)
            dist.barrier()  # the next run starts together
        if rank == 0:
            out.put(medians)
    except BaseException:
        out.put(traceback.format_exc())
        raise
    finally:
        dist.destroy_process_group()


def measure(args: argparse.Namespace) -> dict[str, float]:
    """Worker 0's median step of each scheduler."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    world = args.workers + 1
    with tempfile.TemporaryDirectory() as tmp:
        store = f"{tmp}/store"
        procs = [
            ctx.Process(target=_rank, args=(rank, world, store, args, out)) for rank in range(world)
        ]
        for p in procs:
            p.start()
        try:
            while True:
                try:
                    got = out.get(timeout=5)
                    break
                except queue.Empty:
                    if any(p.exitcode not in (None, 0) for p in procs):
                        got = "a rank died"
                        break
        finally:
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
    if not isinstance(got, dict):
        raise SystemExit(f"error: the benchmark's ranks failed:\n{got}")
    return got


def host_limit(args: argparse.Namespace) -> HostLimit:
    cfg = compose("ps_bsp", args.workers)
    elements = sum(p.numel() for p in MODELS[MODEL]().parameters())
    nbytes = elements * GRADIENT_ELEMENT_BYTES
    torch.set_num_threads(args.server_threads)  # the server's update, as it runs it
    return HostLimit(nbytes, loopback_rate(nbytes, 5), server_update_s(cfg, elements, 5))


def table(medians: dict[str, float], limit: HostLimit, args: argparse.Namespace) -> str:
    lines = [
        f"`python -m benchmarks.ps_exchange {' '.join(sys.argv[1:])}` — {args.workers} gloo "
        f"worker(s) and 1 server ({args.server_threads} thread(s)) on {machine()}; {MODEL}, "
        f"`compressor=none`; median of {args.steps} steps after {args.warmup}. Host limit: "
        f"{limit}.",
        "",
        "| scheduler | exchange ms/step | host limit ms | exchange ÷ limit |",
        "|---|---:|---:|---:|",
    ]
    for name, seconds in medians.items():
        ratio = seconds / limit.seconds
        lines.append(f"| {name} | {seconds * 1e3:.1f} | {limit.seconds * 1e3:.1f} | {ratio:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedulers", nargs="+", default=list(SCHEDULERS))
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--server-threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    medians = measure(args)
    body = table(medians, host_limit(args), args)
    publish("ps_exchange", "Parameter servers' exchange on the CPU", body, write=args.write)


if __name__ == "__main__":
    main()
