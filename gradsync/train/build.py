"""Turn the resolved config into live components. With gradsync.cli, the only code reading cfg."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from gradsync.config.instantiate import build
from gradsync.config.schema import Precision
from gradsync.data.spec import DataSpec, DataSplits
from gradsync.families import option_schema
from gradsync.metrics.loggers import (
    ConsoleLogger,
    JsonlLogger,
    LoggerGroup,
    NullLogger,
    WandbLogger,
)
from gradsync.metrics.summary import METRICS_FILE
from gradsync.schedulers.engine.loss_scale import LossScale
from gradsync.train.precision import MixedPrecision
from gradsync.types import Collective, MetricsLogger, SyncModel

log = logging.getLogger("gradsync")


def build_data(cfg: DictConfig) -> DataSplits:
    return build(cfg.dataset, path="dataset").load()


def build_model(cfg: DictConfig, spec: DataSpec) -> nn.Module:
    return build(cfg.model, path="model")(spec=spec)


def compressor_applies_momentum(cfg: DictConfig) -> bool:
    """The job's compressor applies momentum to what it sends (DGC's momentum correction, which
    takes trainer.momentum as its own by default), so the optimizer steps without any."""
    schema = option_schema(cfg.get("compressor"), "compressor")
    return bool(getattr(schema, "applies_momentum", False))


def build_optimizer(cfg: DictConfig, model: nn.Module) -> Optimizer:
    t = cfg.trainer
    params = [p for p in model.parameters() if p.requires_grad]
    if t.optimizer == "adam":
        betas = (float(t.adam_betas[0]), float(t.adam_betas[1]))
        return torch.optim.Adam(params, lr=t.lr, betas=betas, weight_decay=t.weight_decay)
    momentum = 0.0 if compressor_applies_momentum(cfg) else float(t.momentum)
    return torch.optim.SGD(
        params,
        lr=t.lr,
        momentum=momentum,
        nesterov=bool(t.nesterov) and momentum > 0,
        weight_decay=t.weight_decay,
    )


def lr_factor(cfg: DictConfig, *, steps_per_epoch: int, total_steps: int) -> Any:
    """The LR multiplier as a function of the optimizer step (epochs may be fractional)."""
    t = cfg.trainer
    schedule = str(t.lr_schedule)
    milestones = sorted(t.lr_milestones)

    def factor(step: int) -> float:
        epoch = step / steps_per_epoch
        if schedule == "step":
            return t.lr_gamma ** math.floor(epoch / t.lr_step_epochs)
        if schedule == "multistep":
            return t.lr_gamma ** sum(epoch >= m for m in milestones)
        if schedule == "cosine":
            return 0.5 * (1 + math.cos(math.pi * min(step, total_steps) / total_steps))
        if schedule == "poly":
            return (1 - min(step, total_steps) / total_steps) ** t.lr_power
        return 1.0

    return factor


def build_lr_scheduler(
    cfg: DictConfig, optimizer: Optimizer, *, steps_per_epoch: int, total_steps: int
) -> LambdaLR:
    factor = lr_factor(cfg, steps_per_epoch=steps_per_epoch, total_steps=total_steps)
    return LambdaLR(optimizer, lr_lambda=factor)


def build_precision(cfg: DictConfig, device: torch.device) -> MixedPrecision:
    return MixedPrecision(Precision(cfg.trainer.precision), device)


def build_sync(
    cfg: DictConfig,
    *,
    collective: Collective,
    clock: Any,
    run_dir: Path | None = None,
    loss_scale: LossScale | None = None,
) -> SyncModel:
    """``loss_scale``: fp16's (``MixedPrecision.loss_scale``), which the scheduler applies."""
    compressor = build(cfg.compressor, path="compressor")
    feedback = build(cfg.feedback, path="feedback", compressor=compressor)
    scheduler = build(cfg.scheduler, path="scheduler")
    return scheduler(
        compressor=compressor,
        feedback=feedback,
        collective=collective,
        clock=clock,
        run_dir=run_dir,
        loss_scale=loss_scale,
    )


def build_logger(
    cfg: DictConfig, *, rank: int, run_dir: Path, total_steps: int, progress_bar: bool
) -> MetricsLogger:
    if rank != 0:
        return NullLogger()
    loggers: list[MetricsLogger] = [
        JsonlLogger(run_dir / METRICS_FILE),
        ConsoleLogger(total_steps=total_steps, eval_only=progress_bar),
    ]
    wandb_cfg = cfg.logger.wandb
    if wandb_cfg is not None:
        loggers.append(
            WandbLogger(
                run_dir=run_dir,
                project=wandb_cfg.project,
                entity=wandb_cfg.entity,
                group=wandb_cfg.group,
                tags=list(wandb_cfg.tags),
                mode=wandb_cfg.mode,
                name=f"{cfg.name}-{run_dir.name}",
                config=OmegaConf.to_container(cfg, resolve=True),  # type: ignore[arg-type]
            )
        )
    return LoggerGroup(loggers)
