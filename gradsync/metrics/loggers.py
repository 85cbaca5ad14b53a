"""Metric sinks. Rank 0 logs through a LoggerGroup; every other rank gets a NullLogger."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from gradsync.types import MetricsLogger

log = logging.getLogger("gradsync")


class NullLogger:
    def log(self, metrics: Mapping[str, float], *, step: int) -> None:
        return None

    def close(self) -> None:
        return None


class JsonlLogger:
    """One JSON object per log call, flushed at once so a killed run keeps what it logged."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")

    def log(self, metrics: Mapping[str, float], *, step: int) -> None:
        clean = {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in metrics.items()
        }
        self._file.write(json.dumps({"step": step, **clean}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class ConsoleLogger:
    """A short line per log step and per evaluation."""

    _SHOWN = (
        ("train/loss", "loss {:.4f}"),
        ("eval/accuracy", "acc {:.4f}"),
        ("eval/accuracy_top5", "top-5 {:.4f}"),
        ("eval/perplexity", "ppl {:.2f}"),
        ("eval/hr@10", "HR@10 {:.4f}"),
        ("eval/loss", "eval loss {:.4f}"),
        ("perf/samples_per_s", "{:.0f} samples/s"),
        ("comm/density_actual", "density {:.4g}"),
    )

    def __init__(self, *, total_steps: int, eval_only: bool = False) -> None:
        self.total_steps = total_steps
        self.eval_only = eval_only
        """With a progress bar on screen, training windows are left to the bar."""

    def log(self, metrics: Mapping[str, float], *, step: int) -> None:
        if self.eval_only and not any(k.startswith("eval/") for k in metrics):
            return
        parts = [f"step {step}/{self.total_steps}"]
        if "epoch" in metrics:
            parts.append(f"epoch {metrics['epoch']:.2f}")
        parts += [fmt.format(metrics[k]) for k, fmt in self._SHOWN if k in metrics]
        log.info(" | ".join(parts))

    def close(self) -> None:
        return None


class WandbLogger:
    """The real wandb client; offline unless the user configured otherwise."""

    def __init__(
        self,
        *,
        run_dir: Path,
        project: str,
        entity: str | None,
        group: str | None,
        tags: Sequence[str],
        mode: Literal["offline", "online", "disabled"],
        name: str,
        config: dict[str, Any],
    ) -> None:
        import os

        import wandb  # imported here: only runs that ask for wandb pay for it

        self._wandb = wandb
        self._run = wandb.init(
            project=project,
            entity=entity,
            group=group,
            tags=list(tags),
            # Left to wandb when WANDB_MODE is set: it reads it, but an argument would win.
            mode=None if "WANDB_MODE" in os.environ else mode,
            name=name,
            dir=str(run_dir),
            config=config,
        )

    def log(self, metrics: Mapping[str, float], *, step: int) -> None:
        self._run.log(dict(metrics), step=step)

    def close(self) -> None:
        self._run.finish()


class LoggerGroup:
    def __init__(self, loggers: Sequence[MetricsLogger]) -> None:
        self.loggers = list(loggers)

    def log(self, metrics: Mapping[str, float], *, step: int) -> None:
        for logger in self.loggers:
            logger.log(metrics, step=step)

    def close(self) -> None:
        errors = []
        for logger in self.loggers:  # close every sink even if one fails
            try:
                logger.close()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
