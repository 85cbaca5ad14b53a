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
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

from gradsync.cluster.agreement import any_rank
from gradsync.cluster.backends import GLOO, Backends
from gradsync.cluster.devices import (
    gpus_on_node,
    local_device,
    missing_gpu,
    sharing_line,
    workers_on_node,
    workers_per_gpu,
)
from gradsync.cluster.env import DistEnv
from gradsync.cluster.group_devices import bound_device, tensors_on
from gradsync.comm.collective import TorchCollective
from gradsync.comm.probe import allreduce_mbit, probe_bytes
from gradsync.config.checks import SettingError
from gradsync.data import loader_workers
from gradsync.data.feeds import Feeds, make_feeds
from gradsync.data.once import load_in_turn
from gradsync.data.sharding import ShardedBatchSampler
from gradsync.data.spec import DataSplits
from gradsync.families import job_backends
from gradsync.launch import PeerLost
from gradsync.metrics.loggers import NullLogger
from gradsync.schedulers.ps.groups import make_groups
from gradsync.stop_signals import Stopped, raise_on_signals
from gradsync.tasks import build_task
from gradsync.train import build as builders
from gradsync.train.capacity import gpu_sharing_problem
from gradsync.train.checkpoint import resume_from
from gradsync.train.faults import FaultPlan, as_comm_timeout, as_peer_lost, raised_from
from gradsync.train.job_identity import job_identity
from gradsync.train.loop import Schedule, Trainer
from gradsync.train.servers import serve, server_threads
from gradsync.train.sync_check import HostSyncCheck, declared_host_syncs
from gradsync.train.timing import make_clock
from gradsync.types import MetricsLogger

log = logging.getLogger("gradsync")


class NoGpuForWorker(RuntimeError):
    """This node has no GPU for the workers placed on it (the job's one-line reason)."""


class GpuTooSmall(RuntimeError):
    """The workers sharing this worker's GPU do not fit in its memory (the one-line reason)."""


@dataclass(frozen=True)
class NodeGpus:
    """What a worker's node holds for the job: its GPUs and its workers."""

    visible: int
    """CUDA devices this process sees."""
    gpus: int
    """GPUs the job holds on this node (``gpus_on_node``)."""
    workers: int
    """Workers among this node's ranks (``workers_on_node``)."""
    name: str

    @property
    def per_gpu(self) -> int:
        return workers_per_gpu(gpus=self.gpus, workers_here=self.workers)


def _node_gpus(cfg: DictConfig, env: DistEnv) -> NodeGpus | None:
    """This rank's node under trainer.device=cuda (None on the CPU: nothing to place)."""
    if cfg.trainer.device != "cuda":
        return None
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    workers_here = workers_on_node(
        rank=env.rank,
        local_rank=env.local_rank,
        local_world_size=env.local_world_size,
        workers=cfg.trainer.workers,
    )
    return NodeGpus(
        visible=visible,
        gpus=gpus_on_node(os.environ, visible, slurm_task=env.launcher == "slurm"),
        workers=workers_here,
        name=f"node {socket.gethostname()}",
    )


def _device(cfg: DictConfig, env: DistEnv, node: NodeGpus | None = None) -> torch.device:
    """A worker's GPU under trainer.device=cuda: its local rank modulo the devices it sees, so
    a node's workers go round robin over its GPUs, several to one GPU when they outnumber
    them. Parameter servers (ranks from trainer.workers up) stay on the CPU. ``node``: this
    rank's ``_node_gpus`` (found here when not given)."""
    node = node or _node_gpus(cfg, env)
    if node is None or env.rank >= cfg.trainer.workers:
        return torch.device("cpu")
    problem = missing_gpu(gpus=node.gpus, workers_here=node.workers, where=node.name)
    # The node has GPUs for this job; this process must see one of them.
    problem = problem or missing_gpu(gpus=node.visible, workers_here=1, where=node.name)
    if problem is not None:
        raise NoGpuForWorker(problem)
    index = local_device(env.local_rank, node.visible)
    if node.per_gpu > 1:  # checked here too: a job from a cluster's queue was not checked
        memory = torch.cuda.get_device_properties(index).total_memory
        problem = gpu_sharing_problem(
            cfg, workers_per_gpu=node.per_gpu, gpu_bytes=memory, where=node.name
        )
        if problem is not None:
            raise GpuTooSmall(problem)
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def init_process_group(
    cfg: DictConfig, env: DistEnv, device: torch.device, node: NodeGpus | None
) -> Backends:
    """The default group, with the job's backends (``job_backends``: the same on every rank,
    since every rank first learns from the rendezvous store whether any node has workers
    sharing a GPU), bound to this rank's GPU only for NCCL. Says once per node whose workers
    share its GPUs how they are placed (``node``: this rank's ``_node_gpus``)."""
    timeout = timedelta(seconds=cfg.trainer.comm_timeout_s)
    store, _, _ = next(
        dist.rendezvous(env.init_method, rank=env.rank, world_size=env.world_size, timeout=timeout)
    )
    store.set_timeout(timeout)
    shares_gpus = node is not None and any_rank(
        dist.PrefixStore("gradsync/placement", store),
        node.per_gpu > 1,
        world_size=env.world_size,
        key="shares_gpus",
    )
    backends = job_backends(cfg, shares_gpus=shares_gpus)
    if node is not None and node.per_gpu > 1 and env.local_rank == 0:
        log.info(
            sharing_line(
                gpus=node.gpus, workers_here=node.workers, where=node.name, backend=backends.workers
            )
        )
    dist.init_process_group(
        backend=backends.world,
        store=dist.PrefixStore("default_pg", store),  # where torch's own rendezvous puts it
        rank=env.rank,
        world_size=env.world_size,
        timeout=timeout,
        device_id=bound_device(backends.world, device),
    )
    return backends


def _broadcast_model(model: torch.nn.Module, *, via: torch.device) -> None:
    """Rank 0's weights and buffers to every rank over the default group, whose tensors live
    on ``via`` (the host for gloo: staged there when the model is on a GPU)."""
    # Identical seeds already give identical weights on CPU; the broadcast makes it a guarantee
    # (GPU initializers need not be bitwise reproducible across devices).
    for tensor in model.state_dict().values():
        staged = tensor.to(via)  # the tensor itself when it is there already
        dist.broadcast(staged, src=0)
        if staged is not tensor:
            tensor.copy_(staged)


def _load_data(cfg: DictConfig, env: DistEnv) -> DataSplits:
    """Load the dataset; when it may be downloaded, one rank fetches it while the others wait
    (``load_in_turn``), so no two processes write the same files."""
    if not cfg.dataset.get("download", False):
        return builders.build_data(cfg)
    return load_in_turn(
        lambda: builders.build_data(cfg),
        rank=env.rank,
        local_rank=env.local_rank,
        barrier=dist.barrier,
    )


def run_worker(cfg: DictConfig, env: DistEnv, run_dir: Path) -> None:
    t = cfg.trainer
    torch.set_num_threads(t.threads_per_worker)
    node = _node_gpus(cfg, env)
    device = _device(cfg, env, node)
    backends = init_process_group(cfg, env, device, node)
    # Parameter servers share the world (ranks trainer.workers and up): the workers' group.
    workers = make_groups(
        t.workers,
        timedelta(seconds=t.comm_timeout_s),
        backend=backends.workers,
        device_id=bound_device(backends.workers, device),
    )

    data = _load_data(cfg, env)
    torch.manual_seed(t.seed)  # the same model everywhere ...
    model = builders.build_model(cfg, data.spec).to(device)
    _broadcast_model(model, via=tensors_on(backends.world, device))
    torch.manual_seed(t.seed + env.rank)  # ... and per-worker randomness after that

    steps_per_epoch, total_steps = _steps(cfg, len(data.train))  # type: ignore[arg-type]
    if env.rank >= t.workers:  # a parameter server
        measured = _announce_link(NullLogger(), env, device)
        serve(cfg, model, server=env.rank - t.workers, steps_per_epoch=steps_per_epoch,
              total_steps=total_steps, link_mbit=measured,
              threads=server_threads(cfg, env))  # fmt: skip
        dist.barrier()
        return
    collective = TorchCollective(group=workers, timeout=timedelta(seconds=t.comm_timeout_s))
    clock = make_clock(device)
    feeds = _feeds(cfg, env, data, device)

    optimizer = builders.build_optimizer(cfg, model)
    if env.is_main and builders.compressor_applies_momentum(cfg):
        log.info(
            f"the compressor applies momentum {cfg.compressor.momentum:g} itself (momentum "
            "correction): the optimizer steps without momentum"
        )
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
        train_batches=feeds.train,
        eval_batches=feeds.evaluation,
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
        run_dir=run_dir,
        global_batch=t.batch_size * t.workers,
        fault=FaultPlan(rank=env.rank),
        show_progress=progress_bar,
        identity=job_identity(cfg),
        host_syncs=HostSyncCheck(
            declared=declared_host_syncs(cfg),
            device=device,
            from_step=t.check_host_syncs_from,
            # gloo copies GPU tensors to the host on threads of its own, waiting for them there.
            backend_waits=device.type == "cuda" and backends.workers == GLOO,
        ),
    )
    if t.resume is not None:
        resume_from(t.resume, trainer.restore)
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


def _feeds(cfg: DictConfig, env: DistEnv, data: DataSplits, device: torch.device) -> Feeds:
    """This worker's batches, with its share of loader processes for a dataset read from disk
    (``trainer.loader_workers``; ``gradsync/data/loader_workers.py``)."""
    t = cfg.trainer
    cpus = loader_workers.worker_cpus(
        os.environ, slurm_task=env.launcher == "slurm", processes_here=env.local_world_size
    )
    processes = loader_workers.loader_workers(
        t.loader_workers, cpus=cpus, threads=t.threads_per_worker
    )
    feeds = make_feeds(
        data,
        device=device,
        batch_size=t.batch_size,
        eval_batch_size=t.eval_batch_size,
        rank=env.rank,
        workers=t.workers,
        seed=t.seed,
        loader_workers=processes,
    )
    if env.is_main:
        log.info(_loading_line(feeds, t.loader_workers, processes=processes, cpus=cpus))
    return feeds


def _loading_line(feeds: Feeds, setting: str, *, processes: int, cpus: int) -> str:
    if feeds.in_memory:
        return "data held in memory on each worker's device: no loader processes"
    if setting != loader_workers.AUTO:
        return f"loader processes per worker: {processes}"
    return f"loader processes per worker: {processes} (trainer.loader_workers=auto, {cpus} cores)"


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
    # Over the default group, on the device its backend sends from (gloo: the host).
    probe_on = tensors_on(dist.get_backend(), device)
    measured = allreduce_mbit(nbytes=probe_bytes(link), device=probe_on)
    logger.log({"runner/link_mbit": link, "runner/probe_mbit": measured}, step=0)
    if env.is_main:
        log.info(f"link {link:g} Mbit/s; all-reduce probe {measured:.0f} Mbit/s")
    return measured


def _report_failure(env_rank: int, exc: BaseException) -> None:
    """Say why this rank failed: on stderr, and in the launcher's error file when it set one.
    A setting the job cannot run with (``SettingError``) is its one line and nothing else: the
    launcher shows it as the rank's failure. A lost peer (``PeerLost``) is one line on stderr:
    another rank's end caused it, and the launcher names that rank. Any other failure comes
    with its traceback."""
    setting = isinstance(exc, SettingError)
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    kind = "" if setting else type(exc).__name__
    one_line = setting or isinstance(exc, PeerLost)
    text = "" if one_line else "".join(traceback.format_exception(exc))
    if not setting:
        sys.stderr.write(text or f"{kind}: {message}\n")
    path = os.environ.get("GRADSYNC_ERROR_FILE")
    if path:
        record = {
            "rank": env_rank,
            "type": kind,
            "message": message,
            "traceback": text,
            "time": time.time(),
        }
        Path(path).write_text(json.dumps(record), encoding="utf-8")


def _stopped_by(exc: BaseException) -> Stopped | None:
    """The stop signal behind ``exc``: itself, or what a wrapper raised it from."""
    return next((error for error in raised_from(exc) if isinstance(error, Stopped)), None)


def _run(config: Path, run_dir: Path, rank: int) -> int:
    """Run this rank: its exit code, 0, 1 (a failure, reported) or 128 + a stop signal."""
    try:
        env = DistEnv.from_environ()
        cfg = OmegaConf.load(config)
        assert isinstance(cfg, DictConfig)
        run_worker(cfg, env, run_dir)
        return 0
    except BaseException as exc:
        stop = _stopped_by(exc)
        if stop is not None:
            # The launcher's stop or anyone else's: not a failure, report nothing (a launcher
            # that did not send it sees the exit code and stops the job).
            return stop.exit_code
        _report_failure(rank, as_peer_lost(exc) or exc)
        return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gradsync.train.worker")
    parser.add_argument("--config", required=True, type=Path, help="resolved config (YAML)")
    parser.add_argument("--run-dir", required=True, type=Path, help="the run's output directory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout, force=True)
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "-1")))
    raise_on_signals()  # SIGINT and SIGTERM alike, for the life of this process
    try:
        try:
            return _run(args.config, args.run_dir, rank)
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
    except Stopped as stop:  # while leaving: a peer that failed first, say, makes the launcher stop
        return stop.exit_code


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
