"""A parameter server's process: what the scheduler's server loop (``schedulers/ps/``) is given,
built from the job's config here (its typed options, compressor, optimizer and learning rate),
so the loops never read the config themselves."""

from __future__ import annotations

from functools import partial

from omegaconf import DictConfig
from torch import nn

from gradsync.config.instantiate import build
from gradsync.families import typed_options
from gradsync.schedulers.ps.server import Observer, Serving
from gradsync.schedulers.ps.server import serve as serve_job
from gradsync.train.build import build_optimizer, lr_factor


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
) -> None:
    """Serve the whole run of ``cfg`` as server ``server`` with the scheduler's own loop."""
    job = serving(
        cfg,
        server=server,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps,
        after_step=after_step,
        link_mbit=link_mbit,
    )
    serve_job(model, job)
