"""gradsync ``scheduler=allreduce`` and ``scheduler=wfbp`` (dense) against PyTorch DDP: same
model, data and workers.

All run in the same worker processes, alternating in blocks (ABCABC...) so that machine noise
hits them alike; the figures reported are ratios of median step times. Run from the repo root:

    .venv/bin/python -m benchmarks.allreduce_vs_ddp --write

``--write`` replaces this benchmark's section of BENCHMARKS.md with the table and the command.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from torch import nn

from benchmarks.report import machine, publish
from gradsync.comm.collective import TorchCollective
from gradsync.compressors.none import NoneCompressor
from gradsync.data.digits import Digits
from gradsync.data.sharding import ShardedBatchSampler
from gradsync.feedback.none import NoneFeedback
from gradsync.models.cnn import CNN
from gradsync.models.mlp import MLP
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from gradsync.schedulers.pipelined.wfbp import WfbpSync

MODELS = {
    "cnn": lambda spec: CNN(spec=spec, channels=[16, 32], hidden=64),
    "mlp-wide": lambda spec: MLP(spec=spec, hidden=[1024, 1024, 1024]),
}


def _batches(rank: int, world: int, batch: int):
    splits = Digits().load()
    sampler = ShardedBatchSampler(
        len(splits.train), batch_size=batch, rank=rank, world_size=world, seed=0
    )
    x, y = splits.train.tensors
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for idx in sampler:
            yield x[idx], y[idx]
        epoch += 1


def _time_block(step_fn, data, steps: int) -> float:
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step_fn(*next(data))
    dist.barrier()
    return (time.perf_counter() - start) / steps


def _dense(scheduler):
    return scheduler(
        compressor=NoneCompressor(),
        feedback=NoneFeedback(),
        collective=TorchCollective(),
        clock=time.perf_counter,
    )


def _worker(rank: int, world: int, store: str, args: argparse.Namespace, out) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    spec = Digits().load().spec
    results = {}
    for name in args.models:
        torch.manual_seed(0)
        ours_model, wfbp_model, ddp_model = (MODELS[name](spec) for _ in range(3))
        wfbp_model.load_state_dict(ours_model.state_dict())
        ddp_model.load_state_dict(ours_model.state_dict())
        ours_opt = torch.optim.SGD(ours_model.parameters(), lr=0.01, momentum=0.9)
        wfbp_opt = torch.optim.SGD(wfbp_model.parameters(), lr=0.01, momentum=0.9)
        sync = _dense(AllreduceSync)
        sync.attach(ours_model, ours_opt)
        wfbp = _dense(WfbpSync)
        wfbp.attach(wfbp_model, wfbp_opt)
        ddp = nn.parallel.DistributedDataParallel(ddp_model)
        ddp_opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
        step_count, comm_time = [0], [0.0]

        def ours(x, y, model=ours_model, opt=ours_opt, sync=sync, count=step_count, comm=comm_time):
            nn.functional.cross_entropy(model(x), y).backward()
            comm[0] += sync.step(step=count[0]).time_comm
            opt.zero_grad(set_to_none=True)
            count[0] += 1

        def pipelined(x, y, model=wfbp_model, opt=wfbp_opt, sync=wfbp, count=step_count):
            sync.begin(step=count[0])
            nn.functional.cross_entropy(model(x), y).backward()
            sync.step(step=count[0])
            opt.zero_grad(set_to_none=True)

        def theirs(x, y, model=ddp, opt=ddp_opt):
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        data = _batches(rank, world, args.batch_size)
        _time_block(ours, data, args.warmup)
        _time_block(pipelined, data, args.warmup)
        _time_block(theirs, data, args.warmup)
        times = {"gradsync": [], "wfbp": [], "ddp": []}
        comm_time[0], first_timed = 0.0, step_count[0]
        for _ in range(args.rounds):
            times["gradsync"].append(_time_block(ours, data, args.steps))
            timed_steps = step_count[0] - first_timed
            times["wfbp"].append(_time_block(pipelined, data, args.steps))
            times["ddp"].append(_time_block(theirs, data, args.steps))
        results[name] = {
            "params": sum(p.numel() for p in ours_model.parameters()),
            "comm_share": comm_time[0] / timed_steps / statistics.mean(times["gradsync"]),
            **{k: statistics.median(v) for k, v in times.items()},
        }
    if rank == 0:
        out.put(results)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20, help="steps per timed block")
    parser.add_argument("--rounds", type=int, default=10, help="alternating blocks per method")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args()

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [
            ctx.Process(target=_worker, args=(r, args.workers, f"{tmp}/store", args, out))
            for r in range(args.workers)
        ]
        for p in procs:
            p.start()
        results = out.get(timeout=1800)
        for p in procs:
            p.join()

    lines = [
        f"`{' '.join(['python -m benchmarks.allreduce_vs_ddp', *sys.argv[1:]])}` — "
        f"{args.workers} gloo workers on one host ({machine()}), batch {args.batch_size}/worker, "
        f"median of {args.rounds} alternating blocks of {args.steps} steps",
        "",
        "| model | parameters | allreduce ms/step | wfbp ms/step | DDP ms/step | allreduce / DDP "
        "| wfbp / DDP | all-reduce share of the allreduce step |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['params']:,} | {r['gradsync'] * 1e3:.2f} | {r['wfbp'] * 1e3:.2f} | "
            f"{r['ddp'] * 1e3:.2f} | {r['gradsync'] / r['ddp']:.2f} | {r['wfbp'] / r['ddp']:.2f} "
            f"| {r['comm_share']:.0%} |"
        )
    table = "\n".join(lines)
    publish("allreduce_vs_ddp", "Dense all-reduce and WFBP vs PyTorch DDP", table, write=args.write)


if __name__ == "__main__":
    main()
