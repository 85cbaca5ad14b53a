"""The worker entry point: ``python -m gradsync.train.worker --config C --run-dir D``.

Started by ``gradsync run`` (one process per rank), by ``torchrun`` or by ``srun``; it reads its
rank from the environment (DistEnv), never composes config and never creates output
directories of its own. If it fails, it writes its error to ``GRADSYNC_ERROR_FILE`` (when the
launcher set one) so the launcher can say which rank failed and why.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader, Subset

from gradsync.comm.collective import TorchCollective
from gradsync.comm.probe import allreduce_mbit, probe_bytes
from gradsync.data.sharding import ShardedBatchSampler, eval_shard
from gradsync.data.spec import DataSplits
from gradsync.dist.env import DistEnv
from gradsync.metrics.loggers import NullLogger
from gradsync.schedulers.ps.groups import make_groups
from gradsync.schedulers.ps.server import serve
from gradsync.tasks import build_task
from gradsync.train import build as builders
from gradsync.train.checkpoint import resolve_checkpoint
from gradsync.train.faults import FaultPlan, as_comm_timeout
from gradsync.train.loop import Schedule, Trainer
from gradsync.train.timing import make_clock
from gradsync.types import MetricsLogger

log = logging.getLogger("gradsync")


def _device(cfg: DictConfig, env: DistEnv) -> torch.device:
    if cfg.trainer.device == "cuda":
        torch.cuda.set_device(env.local_rank)
        return torch.device("cuda", env.local_rank)
    return torch.device("cpu")


def init_process_group(cfg: DictConfig, env: DistEnv, device: torch.device) -> None:
    dist.init_process_group(
        backend="nccl" if device.type == "cuda" else "gloo",
        init_method=env.init_method,
        rank=env.rank,
        world_size=env.world_size,
        timeout=timedelta(seconds=cfg.trainer.comm_timeout_s),
        device_id=device if device.type == "cuda" else None,
    )


def _broadcast_model(model: torch.nn.Module) -> None:
    # Identical seeds already give identical weights on CPU; the broadcast makes it a guarantee
    # (GPU initializers need not be bitwise reproducible across devices).
    for tensor in model.state_dict().values():
        dist.broadcast(tensor, src=0)


def _load_data(cfg: DictConfig, env: DistEnv) -> DataSplits:
    """Load the dataset; when it may be downloaded, local rank 0 fetches it while the others
    wait, so no two processes write the same files."""
    if not cfg.dataset.get("download", False):
        return builders.build_data(cfg)
    if env.local_rank != 0:
        dist.barrier()
    data = builders.build_data(cfg)
    if env.local_rank == 0:
        dist.barrier()
    return data


def run_worker(cfg: DictConfig, env: DistEnv, run_dir: Path) -> None:
    t = cfg.trainer
    torch.set_num_threads(t.threads_per_worker)
    device = _device(cfg, env)
    init_process_group(cfg, env, device)
    # Parameter servers share the world (ranks trainer.workers and up): the workers' group.
    workers = make_groups(t.workers, timedelta(seconds=t.comm_timeout_s))

    data = _load_data(cfg, env)
    torch.manual_seed(t.seed)  # the same model everywhere ...
    model = builders.build_model(cfg, data.spec).to(device)
    _broadcast_model(model)
    torch.manual_seed(t.seed + env.rank)  # ... and per-worker randomness after that

    steps_per_epoch, total_steps = _steps(cfg, len(data.train))  # type: ignore[arg-type]
    if env.rank >= t.workers:  # a parameter server
        measured = _announce_link(NullLogger(), env, device)
        serve(cfg, model, server=env.rank - t.workers, steps_per_epoch=steps_per_epoch,
              total_steps=total_steps, link_mbit=measured)  # fmt: skip
        dist.barrier()
        return
    collective = TorchCollective(group=workers, timeout=timedelta(seconds=t.comm_timeout_s))
    clock = make_clock(device)
    sampler = ShardedBatchSampler(
        len(data.train),  # type: ignore[arg-type]
        batch_size=t.batch_size,
        rank=env.rank,
        world_size=t.workers,
        seed=t.seed,
    )
    loader_options = {
        "num_workers": t.loader_workers,
        "pin_memory": device.type == "cuda",
        "persistent_workers": t.loader_workers > 0,
    }
    train_loader = DataLoader(data.train, batch_sampler=sampler, **loader_options)
    eval_indices = eval_shard(len(data.test), rank=env.rank, world_size=t.workers)  # type: ignore[arg-type]
    eval_loader = DataLoader(
        Subset(data.test, eval_indices), batch_size=t.eval_batch_size, **loader_options
    )

    optimizer = builders.build_optimizer(cfg, model)
    lr_scheduler = builders.build_lr_scheduler(
        cfg, optimizer, steps_per_epoch=steps_per_epoch, total_steps=total_steps
    )
    precision = builders.build_precision(cfg, device)
    sync = builders.build_sync(
        cfg, collective=collective, clock=clock, run_dir=run_dir, loss_scale=precision.loss_scale
    )
    sync.attach(model, optimizer)
    interactive = os.environ.get("GRADSYNC_PROGRESS", "1" if sys.stderr.isatty() else "0") == "1"
    progress_bar = env.is_main and interactive and cfg.logger.progress
    logger = builders.build_logger(
        cfg, rank=env.rank, run_dir=run_dir, total_steps=total_steps, progress_bar=progress_bar
    )
    _announce_link(logger, env, device)
    trainer = Trainer(
        model=model,
        task=build_task(data.spec),
        optimizer=optimizer,
        lr_scheduler=lr_scheduler,
        sync=sync,
        collective=collective,
        train_loader=train_loader,
        sampler=sampler,
        eval_loader=eval_loader,
        logger=logger,
        schedule=Schedule(
            epochs=t.epochs,
            steps_per_epoch=steps_per_epoch,
            total_steps=total_steps,
            log_every=t.log_every,
            eval_every_epochs=t.eval_every_epochs,
            save_checkpoints=t.checkpoint,
        ),
        device=device,
        precision=precision,
        clock=clock,
        run_dir=run_dir,
        global_batch=t.batch_size * t.workers,
        fault=FaultPlan(rank=env.rank),
        show_progress=progress_bar,
    )
    if t.resume is not None:
        trainer.restore(resolve_checkpoint(t.resume))
    try:
        try:
            trainer.fit()
        except RuntimeError as exc:
            timeout = as_comm_timeout(exc, t.comm_timeout_s)
            if timeout is None:
                raise
            raise timeout from exc
        sync.close()  # everything landed (fit ends with a flush): its thread has no work left
        # Leave together: a rank that tears down its gloo group while a peer is still in the
        # last collective can abort the process.
        dist.barrier()
    finally:
        logger.close()


def _steps(cfg: DictConfig, train_size: int) -> tuple[int, int]:
    """(steps per epoch, total steps) of every worker: what the sampler gives each worker,
    and what parameter servers count on."""
    t = cfg.trainer
    steps_per_epoch = len(
        ShardedBatchSampler(
            train_size, batch_size=t.batch_size, rank=0, world_size=t.workers, seed=t.seed
        )
    )
    total_steps = t.epochs * steps_per_epoch
    if t.max_steps is not None:
        total_steps = min(total_steps, t.max_steps)
    return steps_per_epoch, total_steps


def _announce_link(logger: MetricsLogger, env: DistEnv, device: torch.device) -> float | None:
    """A runner that shapes the network announces the link rate; log it with a measured probe,
    so every run shows the bandwidth it really had. The probe's Mbit/s, or None."""
    announced = os.environ.get("GRADSYNC_LINK_MBIT")
    if announced is None or env.world_size < 2:
        return None
    link = float(announced)
    measured = allreduce_mbit(nbytes=probe_bytes(link), device=device)
    logger.log({"runner/link_mbit": link, "runner/probe_mbit": measured}, step=0)
    if env.is_main:
        log.info(f"link {link:g} Mbit/s; all-reduce probe {measured:.0f} Mbit/s")
    return measured


class Terminated(BaseException):
    """SIGTERM arrived (the launcher is stopping the job); unwinds so ``finally`` blocks run."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


def _report_failure(env_rank: int, exc: BaseException) -> None:
    text = "".join(traceback.format_exception(exc))
    sys.stderr.write(text)
    path = os.environ.get("GRADSYNC_ERROR_FILE")
    if path:
        record = {
            "rank": env_rank,
            "type": type(exc).__name__,
            "message": str(exc).strip().splitlines()[0] if str(exc).strip() else "",
            "traceback": text,
            "time": time.time(),
        }
        Path(path).write_text(json.dumps(record), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gradsync.train.worker")
    parser.add_argument("--config", required=True, type=Path, help="resolved config (YAML)")
    parser.add_argument("--run-dir", required=True, type=Path, help="the run's output directory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout, force=True)
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "-1")))
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        env = DistEnv.from_environ()
        cfg = OmegaConf.load(args.config)
        assert isinstance(cfg, DictConfig)
        run_worker(cfg, env, args.run_dir)
        return 0
    except Terminated:
        return 128 + signal.SIGTERM  # stopped by the launcher: not the cause, report nothing
    except BaseException as exc:
        _report_failure(rank, exc)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def exit_now(code: int) -> None:
    """Flush and leave without running C++ static destructors: a gloo or TCP-store thread still
    joinable at that point calls std::terminate ("terminate called without an active
    exception") and turns a finished run into a SIGABRT. Everything the run writes is closed
    by now (logger, checkpoints, error file)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
