"""A parameter server's process: what the scheduler's server loop (``schedulers/ps/``) is given,
built from the job's config here (its typed options, compressor, optimizer and learning rate),
so the loops never read the config themselves; and how many threads it computes with.

Threads: a server's arithmetic (summing pushes, the optimizer's step over its shard, the
replies' copies) runs on torch's intra-op threads, one rule for every launcher
(``server_threads``): the cores of its host that the workers there leave, shared by the servers
there. Under Slurm a task's cores are its own (``SLURM_CPUS_PER_TASK``), so a server takes all
of its task's; elsewhere the cores this process may run on, less ``trainer.threads_per_worker``
for each worker on the node (a worker's loader processes, for a dataset read from disk, are not
counted: they wait on the disk more than they compute), over the node's servers. At least one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import partial

import torch
from omegaconf import DictConfig
from torch import nn

from gradsync.cluster.devices import workers_on_node
from gradsync.cluster.env import DistEnv
from gradsync.config.instantiate import build
from gradsync.data.loader_workers import worker_cpus
from gradsync.families import typed_options
from gradsync.schedulers.ps.server import Observer, Serving
from gradsync.schedulers.ps.server import serve as serve_job
from gradsync.train.build import build_optimizer, lr_factor


def leftover_threads(*, cpus: int, workers_here: int, threads_per_worker: int, servers: int) -> int:
    """Threads of each of ``servers`` servers sharing ``cpus`` cores with ``workers_here``
    workers of ``threads_per_worker`` threads each (at least one)."""
    return max(1, (cpus - workers_here * threads_per_worker) // max(1, servers))


def server_threads(cfg: DictConfig, env: DistEnv, environ: Mapping[str, str] = os.environ) -> int:
    """This server's compute threads (the module's rule)."""
    slurm_task = env.launcher == "slurm" and environ.get("SLURM_CPUS_PER_TASK", "").isdigit()
    cpus = worker_cpus(environ, slurm_task=slurm_task, processes_here=1)
    if slurm_task:  # no other process of the job runs on the task's cores
        return max(1, cpus)
    workers_here = workers_on_node(
        rank=env.rank,
        local_rank=env.local_rank,
        local_world_size=env.local_world_size,
        workers=int(cfg.trainer.workers),
    )
    return leftover_threads(
        cpus=cpus,
        workers_here=workers_here,
        threads_per_worker=int(cfg.trainer.threads_per_worker),
        servers=env.local_world_size - workers_here,
    )


def serving(
    cfg: DictConfig,
    *,
    server: int,
    steps_per_epoch: int,
    total_steps: int,
    after_step: Observer | None = None,
    link_mbit: float | None = None,
) -> Serving:
    """What server ``server`` (0-based, among the servers) of the job ``cfg`` serves with."""
    factor = lr_factor(cfg, steps_per_epoch=steps_per_epoch, total_steps=total_steps)
    base_lr = float(cfg.trainer.lr)
    return Serving(
        server=server,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps,
        workers=int(cfg.trainer.workers),
        options=typed_options(cfg.scheduler, "scheduler"),
        compressor=build(cfg.compressor, path="compressor"),
        optimizer_for=partial(build_optimizer, cfg),
        learning_rate=lambda step: base_lr * factor(step),
        after_step=after_step,
        link_mbit=link_mbit,
    )


def serve(
    cfg: DictConfig,
    model: nn.Module,
    *,
    server: int,
    steps_per_epoch: int,
    total_steps: int,
    after_step: Observer | None = None,
    link_mbit: float | None = None,
    threads: int | None = None,
) -> None:
    """Serve the whole run of ``cfg`` as server ``server`` with the scheduler's own loop, on
    ``threads`` compute threads (``server_threads``; None: as the process has them)."""
    if threads is not None:
        torch.set_num_threads(threads)
    job = serving(
        cfg,
        server=server,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps,
        after_step=after_step,
        link_mbit=link_mbit,
    )
    serve_job(model, job)
