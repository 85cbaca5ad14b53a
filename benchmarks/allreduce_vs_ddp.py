"""gradsync ``scheduler=allreduce`` and ``scheduler=wfbp`` (dense) against PyTorch DDP: same
model, data and workers, on CPUs (gloo) or on GPUs (NCCL).

All run in the same worker processes, alternating in blocks (ABCABC...) so that machine noise
hits them alike; the figures reported are ratios of median step times. Run from the repo root:

    .venv/bin/python -m benchmarks.allreduce_vs_ddp --write
    .venv/bin/python -m benchmarks.allreduce_vs_ddp --device cuda --model resnet50 --write

On GPUs each worker has one (NCCL puts one rank on one GPU): N GPUs, N workers. With one GPU
the single worker has nobody to exchange with, so the run measures what the hooks and the
engine cost against DDP's, and its table says so.

``--write`` replaces this benchmark's section of BENCHMARKS.md (one per device) with the table
and the command.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import tempfile
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import Tensor, nn

from benchmarks.measure import IMAGENET, block_time
from benchmarks.report import machine, publish
from gradsync.comm.collective import TorchCollective
from gradsync.compressors.none import NoneCompressor
from gradsync.data.digits import Digits
from gradsync.data.sharding import ShardedBatchSampler
from gradsync.data.spec import DataSpec
from gradsync.feedback.none import NoneFeedback
from gradsync.models.cnn import CNN
from gradsync.models.mlp import MLP
from gradsync.models.resnet import ResNet
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from gradsync.schedulers.pipelined.wfbp import WfbpSync
from gradsync.train.timing import make_clock

DIGITS = Digits().known_spec()
MODELS: dict[str, tuple[DataSpec, Callable[[DataSpec], nn.Module]]] = {
    "cnn": (DIGITS, lambda spec: CNN(spec=spec, channels=[16, 32], hidden=64)),
    "mlp-wide": (DIGITS, lambda spec: MLP(spec=spec, hidden=[1024, 1024, 1024])),
    "resnet50": (IMAGENET, lambda spec: ResNet(spec=spec, depth=50)),
}
DEFAULT_MODELS = ["cnn", "mlp-wide"]
DEVICES = ("cpu", "cuda")


def workers_for(device: str, requested: int | None, gpus: int) -> int:
    """Worker processes for a run on ``device`` (``requested``: --workers, None when not
    given) on a machine with ``gpus`` CUDA GPUs; ValueError, saying what to do, when that
    cannot run here."""
    if device == "cpu":
        return requested or 2
    if gpus == 0:
        raise ValueError("--device cuda needs a CUDA GPU and torch finds none; use --device cpu")
    if requested is not None and requested > gpus:
        raise ValueError(
            f"--workers {requested} needs a GPU each (NCCL puts one rank on one GPU) and this "
            f"machine has {gpus}; use --workers {gpus} or fewer"
        )
    return requested or gpus


def _training_set(spec: DataSpec, samples: int) -> tuple[Tensor, Tensor]:
    """Digits' training set; for another spec, ``samples`` random images of its shape (what a
    step costs does not depend on the pixels), made once rather than at every step."""
    if spec == DIGITS:
        x, y = Digits().load().train.tensors
        return x, y
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(samples, *spec.input_shape, generator=gen)
    return x, torch.randint(spec.num_classes, (samples,), generator=gen)


def _batches(x: Tensor, y: Tensor, rank: int, world: int, batch: int):
    sampler = ShardedBatchSampler(len(x), batch_size=batch, rank=rank, world_size=world, seed=0)
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for idx in sampler:
            yield x[idx], y[idx]
        epoch += 1


def _time_block(step_fn, data, steps: int, device: torch.device) -> float:
    return block_time(lambda: step_fn(*next(data)), steps, device)


def _dense(scheduler, device: torch.device):
    return scheduler(
        compressor=NoneCompressor(),
        feedback=NoneFeedback(),
        collective=TorchCollective(),
        clock=make_clock(device),
    )


def _worker(rank: int, world: int, store: str, args: argparse.Namespace, out) -> None:
    torch.set_num_threads(1)
    device, backend = torch.device("cpu"), "gloo"
    if args.device == "cuda":
        torch.cuda.set_device(rank)
        device, backend = torch.device("cuda", rank), "nccl"
    dist.init_process_group(
        backend,
        init_method=f"file://{store}",
        rank=rank,
        world_size=world,
        device_id=device if device.type == "cuda" else None,
    )
    results = {}
    for name in args.models:
        spec, build = MODELS[name]
        torch.manual_seed(0)
        ours_model, wfbp_model, ddp_model = (build(spec).to(device) for _ in range(3))
        wfbp_model.load_state_dict(ours_model.state_dict())
        ddp_model.load_state_dict(ours_model.state_dict())
        ours_opt = torch.optim.SGD(ours_model.parameters(), lr=0.01, momentum=0.9)
        wfbp_opt = torch.optim.SGD(wfbp_model.parameters(), lr=0.01, momentum=0.9)
        sync = _dense(AllreduceSync, device)
        sync.attach(ours_model, ours_opt)
        wfbp = _dense(WfbpSync, device)
        wfbp.attach(wfbp_model, wfbp_opt)
        ddp = nn.parallel.DistributedDataParallel(
            ddp_model, device_ids=[device] if device.type == "cuda" else None
        )
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

        x, y = (t.to(device) for t in _training_set(spec, args.batch_size * world))
        data = _batches(x, y, rank, world, args.batch_size)
        _time_block(ours, data, args.warmup, device)
        _time_block(pipelined, data, args.warmup, device)
        _time_block(theirs, data, args.warmup, device)
        times = {"gradsync": [], "wfbp": [], "ddp": []}
        comm_time[0], first_timed = 0.0, step_count[0]
        for _ in range(args.rounds):
            times["gradsync"].append(_time_block(ours, data, args.steps, device))
            timed_steps = step_count[0] - first_timed
            times["wfbp"].append(_time_block(pipelined, data, args.steps, device))
            times["ddp"].append(_time_block(theirs, data, args.steps, device))
        wfbp.close()  # their communication threads are done: none outlives its model
        sync.close()
        results[name] = {
            "params": sum(p.numel() for p in ours_model.parameters()),
            # On CUDA the sum of spans is read here, once: a step never waits to time itself.
            "comm_share": float(comm_time[0]) / timed_steps / statistics.mean(times["gradsync"]),
            **{k: statistics.median(v) for k, v in times.items()},
        }
    if rank == 0:
        out.put(results)
    dist.destroy_process_group()


def _workers_here(args: argparse.Namespace) -> int:
    """``workers_for`` this machine; a run it cannot hold ends here with one line, exit 2."""
    gpus = torch.cuda.device_count() if args.device == "cuda" and torch.cuda.is_available() else 0
    try:
        return workers_for(args.device, args.workers, gpus)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _setting(device: str, workers: int) -> str:
    """Who ran the table, for the line above it."""
    if device == "cpu":
        return f"{workers} gloo worker{'s' * (workers > 1)} on one host ({machine()})"
    if workers == 1:
        return (
            f"1 NCCL worker on 1 GPU ({machine('cuda')}): no peer to exchange with, so this "
            "measures what gradsync's hooks and engine cost against DDP's"
        )
    return f"{workers} NCCL workers, one GPU each ({machine('cuda')})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=DEVICES, default="cpu")
    parser.add_argument(
        "--workers", type=int, default=None, help="default: 2 on cpu, every GPU on cuda"
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20, help="steps per timed block")
    parser.add_argument("--rounds", type=int, default=10, help="alternating blocks per method")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument(
        "--models", "--model", nargs="+", default=DEFAULT_MODELS, choices=list(MODELS)
    )
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args()
    workers = _workers_here(args)

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [
            ctx.Process(target=_worker, args=(r, workers, f"{tmp}/store", args, out))
            for r in range(workers)
        ]
        for p in procs:
            p.start()
        results = out.get(timeout=1800)
        for p in procs:
            p.join()

    lines = [
        f"`{' '.join(['python -m benchmarks.allreduce_vs_ddp', *sys.argv[1:]])}` — "
        f"{_setting(args.device, workers)}, batch {args.batch_size}/worker, "
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
    if args.device == "cpu":
        key, title = "allreduce_vs_ddp", "Dense all-reduce and WFBP vs PyTorch DDP"
    else:
        key, title = "allreduce_vs_ddp_cuda", "Dense all-reduce and WFBP vs PyTorch DDP on GPUs"
    publish(key, title, table, write=args.write)


if __name__ == "__main__":
    main()
