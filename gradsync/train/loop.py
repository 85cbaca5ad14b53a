"""The training loop. It never names a method: everything about communication is sync.step()."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR
from tqdm import tqdm

from gradsync.data.feeds import Batch, TrainFeed
from gradsync.metrics.window import MetricsWindow
from gradsync.schedulers.engine.step_timer import Mark, StepTimer, elapsed
from gradsync.tasks import Task
from gradsync.train import checkpoint
from gradsync.train.faults import FaultPlan
from gradsync.train.precision import MixedPrecision
from gradsync.train.sync_check import HostSyncCheck
from gradsync.types import Collective, MetricsLogger, SyncModel

log = logging.getLogger("gradsync")


@dataclass(frozen=True)
class Schedule:
    epochs: int
    steps_per_epoch: int
    total_steps: int
    log_every: int
    eval_every_epochs: int
    save_checkpoints: bool


class Trainer:
    def __init__(
        self,
        *,
        model: nn.Module,
        task: Task,
        optimizer: Optimizer,
        lr_scheduler: LambdaLR,
        sync: SyncModel,
        collective: Collective,
        train_batches: TrainFeed,
        eval_batches: Iterable[Batch],
        logger: MetricsLogger,
        schedule: Schedule,
        device: torch.device,
        precision: MixedPrecision,
        run_dir: Path,
        global_batch: int,
        fault: FaultPlan,
        show_progress: bool,
        host_syncs: HostSyncCheck | None = None,
        identity: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.task = task
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.sync = sync
        self.collective = collective
        self.train_batches = train_batches
        self.eval_batches = eval_batches
        self.logger = logger
        self.schedule = schedule
        self.device = device
        self.precision = precision
        self.timer = StepTimer(device)
        self.run_dir = run_dir
        self.global_batch = global_batch
        self.fault = fault
        self.show_progress = show_progress
        self.host_syncs = host_syncs or HostSyncCheck(declared={}, device=device, from_step=None)
        """``trainer.check_host_syncs_from``: the steps it checks run under it."""
        self.identity = identity
        """The job's (``job_identity``), saved with each checkpoint."""
        self.position = checkpoint.Position(epoch=0, batch_in_epoch=0, step=0)
        self.window = MetricsWindow()
        self._started = time.perf_counter()

    # ---- the loop -------------------------------------------------------------------------
    def fit(self) -> None:
        s = self.schedule
        progress = tqdm(
            total=s.total_steps,
            initial=self.position.step,
            desc="train",
            disable=not self.show_progress,
            dynamic_ncols=True,
        )
        self._started = time.perf_counter()
        try:
            while self.position.step < s.total_steps and self.position.epoch < s.epochs:
                self._train_epoch(progress)
            if self.window.steps:  # steps since the last full log window
                self._log_window()
            if self.host_syncs.from_step is not None:
                passed = self.host_syncs.passed
                seen = ", ".join(f"{p} ×{n}" for p, n in sorted(passed.items())) or "none"
                log.info(f"host syncs from step {self.host_syncs.from_step}: {seen}")
        finally:
            progress.close()

    def _train_epoch(self, progress: tqdm) -> None:
        s = self.schedule
        epoch, done_in_epoch = self.position.epoch, self.position.batch_in_epoch
        batches = self._timed(self.train_batches.epoch(epoch, skip=done_in_epoch))
        while True:
            with self.host_syncs.step(self.position.step):  # taking the batch included
                taken = next(batches, None)
                if taken is not None:
                    self._train_step(*taken)
            if taken is None:
                break
            done_in_epoch += 1
            self.position = checkpoint.Position(epoch, done_in_epoch, self.position.step + 1)
            progress.update(1)
            if self.position.step % s.log_every == 0:
                progress.set_postfix_str(self._log_window(), refresh=False)
            if self.position.step >= s.total_steps:
                break
        if done_in_epoch == s.steps_per_epoch:
            self.position = checkpoint.Position(epoch + 1, 0, self.position.step)
        finished = self.position.step >= s.total_steps or self.position.epoch >= s.epochs
        self.sync.flush()  # updates still in flight land before the model is evaluated or saved
        if finished or (epoch + 1) % s.eval_every_epochs == 0:
            self._evaluate()
        if s.save_checkpoints:
            self.save()

    def _timed(self, it: Iterator[Batch]) -> Iterator[tuple[Batch, Mark, Mark]]:
        # Marks around taking each batch. On a GPU they are events on the compute stream, so
        # the span is what the step's stream spent on data: the batch's kernels (cutting,
        # augmenting) or its wait for a side-stream copy when the device is the bottleneck,
        # the host's wait for a loader when the host is.
        while True:
            start = self.timer.mark()
            try:
                batch = next(it)
            except StopIteration:
                return
            yield batch, start, self.timer.mark()

    def _train_step(self, batch: Batch, data_start: Mark, data_end: Mark) -> None:
        self.fault.check(self.position.step)
        # Marks, not clock reads: on a GPU an event each, turned into seconds when the window
        # is logged, so the step never waits for the device to time itself.
        timer = self.timer
        start = timer.mark()
        self.sync.begin(step=self.position.step, epoch=self.position.epoch)
        with self.precision.autocast():
            loss = self.task.loss(self.model, batch)
        forwarded = timer.mark()
        self.precision.backward(self.fault.differentiated(loss, self.position.step))
        backwarded = timer.mark()
        stats = self.sync.step(
            step=self.position.step, epoch=self.position.epoch, loss=loss.detach()
        )
        self.optimizer.zero_grad(set_to_none=True)
        self.lr_scheduler.step()
        ended = timer.mark()
        self.window.add(
            {
                "train/loss": loss.detach(),  # read when the window is logged
                "comm/bytes_sent": stats.bytes_sent,
                "comm/bytes_wire": stats.bytes_wire,
                "comm/bytes_dense": stats.bytes_dense,
                "comm/density_setup": stats.density_setup,
                "comm/density_actual": stats.density_actual,
                "comm/error_norm": stats.error_norm,
                "time/data": elapsed(data_start, data_end),
                "time/forward": elapsed(start, forwarded, -stats.time_in_forward),
                "time/backward": elapsed(forwarded, backwarded, -stats.time_in_backward),
                "time/compress": stats.time_compress,
                "time/comm": stats.time_comm,
                "time/update": stats.time_update,
                "time/iteration": elapsed(data_start, ended),
                **stats.extra,
            }
        )

    # ---- metrics --------------------------------------------------------------------------
    def _mean_over_workers(self, values: dict[str, float]) -> dict[str, float]:
        if not self.sync.workers_in_lockstep:
            return dict(values)  # a collective here would make the workers wait for each other
        keys = sorted(values)
        metrics = self.sync.metrics_collective()
        sums = metrics.reduce_metrics([values[k] for k in keys], device=self.device)
        n = self.collective.world_size
        return {k: v / n for k, v in zip(keys, sums, strict=True)}

    def _slowest_worker(self, series: dict[str, list[float]]) -> dict[str, float]:
        """For each named per-step series, the mean over the window's steps of its largest
        per-step value on any worker: the worker everyone waits for (a CLT-k leader, DEFT's
        busiest bin, the worker a shared host's cores served last). One collective for all."""
        if not self.sync.workers_in_lockstep:  # this worker's own
            return {name: sum(values) / len(values) for name, values in series.items()}
        flat = [value for values in series.values() for value in values]
        metrics = self.sync.metrics_collective()
        maxima = iter(metrics.reduce_metrics(flat, device=self.device, op="max"))
        return {
            name: sum(next(maxima) for _ in values) / len(values) for name, values in series.items()
        }

    def _log_window(self) -> str:
        window = self.window
        passes = zip(window.series("time/forward"), window.series("time/backward"), strict=True)
        slowest = self._slowest_worker(
            {
                "time/compress_max": window.series("time/compress"),
                "time/forward_max": window.series("time/forward"),
                "time/compute_max": [forward + backward for forward, backward in passes],
                # The busiest link's: a CLT-k leader's broadcast is on its uplink alone.
                "comm/bytes_wire_max": window.series("comm/bytes_wire"),
            }
        )
        metrics = self._mean_over_workers(window.means())
        metrics.update(slowest)
        # A ratio of the window's totals, not a mean of per-step ratios.
        dense, sent = metrics.pop("comm/bytes_dense"), metrics["comm/bytes_sent"]
        if sent > 0:
            metrics["comm/compression_ratio"] = dense / sent
        metrics["perf/samples_per_s"] = self.global_batch / metrics["time/iteration"]
        metrics["lr"] = float(self.lr_scheduler.get_last_lr()[0])  # a tensor when lr is one
        metrics.update(self.precision.metrics())
        metrics.update(self._clock_metrics())
        self.logger.log(metrics, step=self.position.step)
        return f"loss {metrics['train/loss']:.4f}"

    def _clock_metrics(self) -> dict[str, float]:
        s = self.schedule
        p = self.position
        return {
            "epoch": p.epoch + p.batch_in_epoch / s.steps_per_epoch,
            "time/elapsed": time.perf_counter() - self._started,
        }

    def _evaluate(self) -> None:
        self.model.eval()
        sums = [0.0] * len(self.task.eval_keys)
        for batch in self.eval_batches:  # on the device already
            with self.precision.autocast():
                batch_sums = self.task.eval_sums(self.model, batch)
            sums = [a + b for a, b in zip(sums, batch_sums, strict=True)]
        self.model.train()
        totals = self.collective.reduce_metrics(sums, device=self.device)
        metrics = {**self.task.eval_metrics(totals), **self._clock_metrics()}
        self.logger.log(metrics, step=self.position.step)

    # ---- checkpoints ----------------------------------------------------------------------
    def save(self) -> None:
        checkpoint.save(
            self.run_dir,
            rank=self.collective.rank,
            world_size=self.collective.world_size,
            position=self.position,
            common={
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "lr_scheduler": self.lr_scheduler.state_dict(),
                "precision": self.precision.state_dict(),
            },
            local={"sync": self.sync.state_dict(), **checkpoint.rng_state(self.device)},
            barrier=self.collective.barrier,
            identity=self.identity,
        )

    def restore(self, path: Path) -> None:
        common, local, position = checkpoint.load(path, rank=self.collective.rank)
        self.model.load_state_dict(common["model"])
        self.optimizer.load_state_dict(common["optimizer"])
        self.lr_scheduler.load_state_dict(common["lr_scheduler"])
        self.precision.load_state_dict(common.get("precision", {}))  # older checkpoints: none
        self.sync.load_state_dict(local["sync"])
        checkpoint.restore_rng(local, self.device)
        self.position = position
        log.info(f"resumed from {path} at epoch {position.epoch}, step {position.step}")
