"""A parameter server's loop (ranks ``trainer.workers`` and up). It holds its shard of the
global parameters as one flat tensor with the job's optimizer (SGD and Adam update elements
independently, so a flat shard steps exactly as the per-tensor parameters would), and the LR
schedule of the workers' step count.

* ``serve_bulk_synchronous`` (``ps_bsp``): every step, a gradient from every worker; their
  mean is applied once; every worker gets the new parameters. The same trajectory as an
  all-reduce of the mean gradient.
* ``serve_stale`` (``asp`` with no bound, ``ssp`` with ``staleness`` s): gradients are taken in the
  order they arrive and each is applied at once (w ← w − (η/N)·g_w: SPECS writes η·g_w with a
  per-worker rate; with the global-batch ``trainer.lr`` every scheduler shares, N pushes then
  move as far as one BSP step). A worker that has pushed c
  gradients gets parameters back only when the slowest worker has pushed at least c − s, so it
  never runs more than s steps ahead; without a bound it gets them at once.

Every pull carries the slowest and fastest worker's clock, so workers can log their staleness.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from gradsync.comm.collective import TorchCollective
from gradsync.comm.solo import SoloCollective
from gradsync.config.instantiate import build, resolve
from gradsync.dist.backends import HOST
from gradsync.schedulers.ps.layout import PULL, Shards
from gradsync.schedulers.ps.messages import recv_payload
from gradsync.train.build import build_optimizer, lr_factor
from gradsync.types import Collective

Apply = Callable[[Tensor, int], None]
"""Apply a gradient to the shard with the learning rate of a given step."""
Observer = Callable[[Tensor], None]
Receive = Callable[[int | None], tuple[int, Tensor]]
"""The next worker's pushed gradient, decompressed: from a given rank, or from any."""


class _Shard(nn.Module):
    def __init__(self, values: Tensor) -> None:
        super().__init__()
        self.values = nn.Parameter(values)


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
    """Serve the whole run with the scheduler's own loop (``scheduler.server``); ``after_step``
    sees this server's flat global parameters after every synchronous iteration (for tests);
    ``link_mbit``: the link's measured rate."""
    loop = resolve(str(cfg.scheduler.server), path="scheduler.server")
    # A server's model and optimizer live on the host, where gloo sends from, whatever device
    # the workers compute on.
    loop(cfg, model.to(HOST), Serving(server, steps_per_epoch, total_steps, after_step, link_mbit))


@dataclass(frozen=True)
class Serving:
    """What a server's loop is told besides the config and the model (see ``serve``)."""

    server: int
    steps_per_epoch: int
    total_steps: int
    after_step: Observer | None = None
    link_mbit: float | None = None


def serve_bulk_synchronous(cfg: DictConfig, model: nn.Module, job: Serving) -> None:
    """ps_bsp: this server's shard, stepped once a step by the mean of every worker's gradient."""
    _shard_loop(cfg, model, job).bulk_synchronous(job.after_step)


def serve_stale(cfg: DictConfig, model: nn.Module, job: Serving) -> None:
    """asp and ssp: this server's shard, stepped by each gradient as it arrives, within
    ``scheduler.staleness`` steps of the slowest worker (None: no bound)."""
    _shard_loop(cfg, model, job).stale(cfg.scheduler.staleness)


def _shard_loop(cfg: DictConfig, model: nn.Module, job: Serving) -> _ShardLoop:
    """This server's shard of the global parameters with the job's optimizer, and its links."""
    server, total_steps = job.server, job.total_steps
    params = [p for p in model.parameters() if p.requires_grad]
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    shards = Shards.of_world(flat.numel(), int(cfg.trainer.workers))
    shard = _Shard(flat[shards.slice(server)].clone())
    optimizer = build_optimizer(cfg, shard)
    factor = lr_factor(cfg, steps_per_epoch=job.steps_per_epoch, total_steps=total_steps)
    base_lr = float(cfg.trainer.lr)

    def apply(gradient: Tensor, step: int) -> None:
        for group in optimizer.param_groups:
            group["lr"] = base_lr * factor(step)
        shard.values.grad = gradient
        optimizer.step()

    compressor = build(cfg.compressor, path="compressor")
    compressor.bind(SoloCollective())  # it only decompresses here, with each worker's context
    link = TorchCollective()  # every rank: this server and the workers, point to point

    def receive(src: int | None) -> tuple[int, Tensor]:
        sender, payload, ctx = recv_payload(link, src)
        return sender, compressor.decompress(payload, ctx).reshape(-1).to(shard.values.dtype)

    return _ShardLoop(link, shard.values, apply, receive, shards.workers, total_steps)


def _reply(values: Tensor, clocks: list[int]) -> Tensor:
    stamp = torch.tensor([min(clocks), max(clocks)], dtype=values.dtype)
    return torch.cat([values.detach().reshape(-1), stamp])


@dataclass(frozen=True)
class _ShardLoop:
    """One server's shard and its links to the workers, for ``total_steps`` steps."""

    link: Collective
    values: Tensor
    apply: Apply
    receive: Receive
    workers: int
    total_steps: int

    def bulk_synchronous(self, after_step: Observer | None) -> None:
        workers = self.workers
        for step in range(self.total_steps):
            gradients = [self.receive(w)[1] for w in range(workers)]
            total = gradients[0].clone()
            for gradient in gradients[1:]:  # in rank order: the same sum on every run
                total += gradient
            self.apply(total / workers, step)
            reply = _reply(self.values, [step + 1] * workers)
            sends = [self.link.start_send((reply,), dst=w, tag=PULL) for w in range(workers)]
            for wait in sends:
                wait()
            if after_step is not None:
                after_step(self.values.detach())

    def stale(self, staleness: int | None) -> None:
        workers, link, values, apply, receive = (
            self.workers, self.link, self.values, self.apply, self.receive
        )  # fmt: skip
        clocks = [0] * workers
        waiting: set[int] = set()
        sends = []
        for _ in range(workers * self.total_steps):
            worker, gradient = receive(None)  # from whichever worker pushes first
            # η/N for each push: N pushes move as far as one BSP step with the same trainer.lr
            # (the other schedulers' lr is the global batch's; η·g_w per push would be N× it).
            apply(gradient / workers, clocks[worker])
            clocks[worker] += 1
            waiting.add(worker)
            slowest = min(clocks)
            for w in sorted(waiting):
                if staleness is None or clocks[w] - slowest <= staleness:
                    sends.append(link.start_send((_reply(values, clocks),), dst=w, tag=PULL))
                    waiting.discard(w)
        assert not waiting, "every worker got its last parameters"
        for wait in sends:
            wait()
