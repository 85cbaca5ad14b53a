"""A parameter server's loop (ranks ``trainer.workers`` and up). It holds its shard of the
global parameters as one flat tensor with the job's optimizer (SGD and Adam update elements
independently, so a flat shard steps exactly as the per-tensor parameters would), and the LR
schedule of the workers' step count.

* ``serve_bulk_synchronous`` (``ps_bsp``): every step, a gradient from every worker; their
  mean is applied once; every worker gets the new parameters. The same trajectory as an
  all-reduce of the mean gradient.
* ``serve_stale`` (``asp`` with no bound, ``ssp`` with ``staleness`` s): gradients are taken in the
  order they arrive and each is applied at once (w ← w − (η/N)·g_w: the papers apply η·g_w
  with a per-worker rate; with the global-batch ``trainer.lr`` every scheduler shares, N pushes
  then move as far as one BSP step; docs/methods/schedulers/asp.md, "Where gradsync differs
  from the paper"). A worker that has pushed c gradients gets parameters back only when the
  slowest worker has pushed at least c − s, so it never runs more than s steps ahead; without a
  bound it gets them at once. A gradient's
  staleness τ is the number of updates this server applied since it sent that worker the
  parameters it computed the gradient at; ``scheduler.staleness_correction`` may correct for it
  (``gradsync/schedulers/engine/staleness.py``: the momentum of that update, DC-ASGD's
  compensation towards the values now, from the values sent, or its learning rate).

Every pull carries the slowest and fastest worker's clock and the staleness the worker's last
gradient was applied with, so workers can log them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from gradsync.cluster.group_devices import HOST
from gradsync.comm.collective import TorchCollective
from gradsync.comm.solo import SoloCollective
from gradsync.config.instantiate import resolve
from gradsync.schedulers.engine.staleness import StalenessCorrection
from gradsync.schedulers.ps.buffers import Buffers
from gradsync.schedulers.ps.config import ParameterServerConfig, StaleConfig
from gradsync.schedulers.ps.layout import PULL, STAMPS, Shards
from gradsync.schedulers.ps.messages import recv_payload
from gradsync.types import Collective, Compressor

Apply = Callable[[Tensor, int, Callable[[Optimizer], None]], None]
"""Apply a gradient to the shard with the learning rate of a given step, stepping the optimizer
as told (``Optimizer.step``, or a staleness correction's ``step``)."""
Observer = Callable[[Tensor], None]
ServerLoop = Callable[[nn.Module, "Serving"], None]
"""A scheduler's server loop (``scheduler.server``), given the model and what it serves with."""
Receive = Callable[[int | None], tuple[int, Tensor]]
"""The next worker's pushed gradient, decompressed: from a given rank, or from any."""


class _Shard(nn.Module):
    def __init__(self, values: Tensor) -> None:
        super().__init__()
        self.values = nn.Parameter(values)


@dataclass(frozen=True)
class Serving:
    """Everything a server's loop is given besides the model: built by the process that starts
    it (``gradsync/train/servers.py``), so the loops read typed options and never the job's
    config."""

    server: int
    steps_per_epoch: int
    total_steps: int
    workers: int
    options: ParameterServerConfig
    """The scheduler's typed options (``ps/config.py``)."""
    compressor: Compressor
    """The job's compressor, which here only decompresses the workers' pushes."""
    optimizer_for: Callable[[nn.Module], Optimizer]
    """The job's optimizer over a module's parameters."""
    learning_rate: Callable[[int], float]
    """The learning rate of an optimizer step (the job's rate and schedule)."""
    after_step: Observer | None = None
    """Sees this server's flat global parameters after every update (for tests: each iteration
    of ps_bsp and osp, each applied gradient of asp and ssp)."""
    link_mbit: float | None = None
    """The link's measured rate."""


def serve(model: nn.Module, job: Serving) -> None:
    """Serve the whole run with the scheduler's own loop (``scheduler.server``)."""
    loop: ServerLoop = resolve(job.options.server, path="scheduler.server")
    # A server's model and optimizer live on the host, where gloo sends from, whatever device
    # the workers compute on.
    loop(model.to(HOST), job)


def serve_bulk_synchronous(model: nn.Module, job: Serving) -> None:
    """ps_bsp: this server's shard, stepped once a step by the mean of every worker's gradient."""
    _shard_loop(model, job).bulk_synchronous(job.after_step)


def serve_stale(model: nn.Module, job: Serving) -> None:
    """asp and ssp: this server's shard, stepped by each gradient as it arrives, within
    ``scheduler.staleness`` steps of the slowest worker (None: no bound), each corrected for
    its staleness as ``scheduler.staleness_correction`` says."""
    options = job.options
    assert isinstance(options, StaleConfig)
    loop = _shard_loop(model, job)
    correction = StalenessCorrection(
        options.staleness_correction, dc_lambda=options.dc_lambda, optimizer=loop.optimizer
    )
    loop.stale(options.staleness, correction, job.after_step)


def _shard_loop(model: nn.Module, job: Serving) -> _ShardLoop:
    """This server's shard of the global parameters with the job's optimizer, and its links."""
    server, total_steps = job.server, job.total_steps
    params = [p for p in model.parameters() if p.requires_grad]
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    shards = Shards.of_world(flat.numel(), job.workers)
    values = flat[shards.slice(server)]
    # The shard's values are the front of the message that carries them to the workers, its
    # stamps after them: ps_bsp's reply is sent as it stands, without a copy.
    message = torch.empty(values.numel() + STAMPS, dtype=values.dtype)
    message[: values.numel()].copy_(values)
    shard = _Shard(message[: values.numel()])
    optimizer = job.optimizer_for(shard)

    def apply(gradient: Tensor, step: int, stepping: Callable[[Optimizer], None]) -> None:
        for group in optimizer.param_groups:
            group["lr"] = job.learning_rate(step)
        shard.values.grad = gradient
        stepping(optimizer)

    compressor = job.compressor
    compressor.bind(SoloCollective())  # it only decompresses here, with each worker's context
    link = TorchCollective()  # every rank: this server and the workers, point to point
    inbox = Buffers()  # one push at a time is received and used

    def receive(src: int | None) -> tuple[int, Tensor]:
        sender, payload, ctx = recv_payload(link, inbox, src)
        dense = inbox.get("dense", values.numel(), values.dtype)
        gradient = compressor.decompress(payload, ctx, out=dense)
        return sender, gradient.reshape(-1).to(values.dtype)

    return _ShardLoop(
        link=link,
        values=shard.values,
        message=message,
        gradient=torch.empty_like(values),
        optimizer=optimizer,
        apply=apply,
        receive=receive,
        workers=shards.workers,
        total_steps=total_steps,
    )


def _plain_step(optimizer: Optimizer) -> None:
    optimizer.step()


def _stamp(message: Tensor, clocks: list[int], staleness: int = 0) -> Tensor:
    """``message`` (the parameters, then ``STAMPS`` slots) with the stamps written in: the
    clocks, and the staleness the worker's last gradient was applied with."""
    stamps = torch.tensor([min(clocks), max(clocks), staleness], dtype=message.dtype)
    message[-STAMPS:].copy_(stamps)
    return message


@dataclass(frozen=True)
class _ShardLoop:
    """One server's shard and its links to the workers, for ``total_steps`` steps. Every
    buffer of a step is made once: the shard's message, the received push (``receive``'s
    gradient is valid until the next one is received), the mean or scaled gradient, and the
    replies of the stale servers."""

    link: Collective
    values: Tensor
    message: Tensor
    """``values`` (a view of its front), then ``STAMPS`` slots."""
    gradient: Tensor
    """What ``apply`` is given: the step's mean, or a push's share."""
    optimizer: Optimizer
    """The one that ``apply`` steps."""
    apply: Apply
    receive: Receive
    workers: int
    total_steps: int

    def bulk_synchronous(self, after_step: Observer | None) -> None:
        workers, mean = self.workers, self.gradient
        for step in range(self.total_steps):
            for w in range(workers):  # in rank order: the same sum on every run
                gradient = self.receive(w)[1]
                if w == 0:
                    mean.copy_(gradient)
                else:
                    mean.add_(gradient)
            self.apply(mean.div_(workers), step, _plain_step)
            reply = _stamp(self.message, [step + 1] * workers)
            sends = [self.link.start_send((reply,), dst=w, tag=PULL) for w in range(workers)]
            for wait in sends:
                wait()
            if after_step is not None:
                after_step(self.values.detach())

    def stale(
        self,
        staleness: int | None,
        correction: StalenessCorrection,
        after_update: Observer | None = None,
    ) -> None:
        workers, link, values, apply, receive = (
            self.workers, self.link, self.values.detach(), self.apply, self.receive
        )  # fmt: skip
        clocks = [0] * workers
        # Each worker's reply, rewritten only once the last one sent to it was waited for.
        replies = [torch.empty_like(self.message) for _ in range(workers)]
        # What each worker computes its next gradient at: the values after update pulled_at[w],
        # as sent (a view of its reply); all start from the model.
        pulled_at = [0] * workers
        held = [values.clone()] * workers
        applied = [0] * workers  # the staleness each worker's last gradient was applied with
        previous = torch.empty_like(values) if correction.predicts else None
        waiting: set[int] = set()
        sending: dict[int, Callable[[], None]] = {}
        for update in range(workers * self.total_steps):  # the updates applied before it
            worker, gradient = receive(None)  # from whichever worker pushes first
            applied[worker] = update - pulled_at[worker]
            gradient = correction.gradient(gradient, now=values, then=held[worker])
            if previous is not None:
                previous.copy_(values)
            # η/N for each push: N pushes move as far as one BSP step with the same trainer.lr
            # (the other schedulers' lr is the global batch's; η·g_w per push would be N× it).
            apply(
                torch.div(gradient, workers, out=self.gradient),
                clocks[worker],
                partial(correction.step, staleness=applied[worker]),
            )
            clocks[worker] += 1
            waiting.add(worker)
            slowest = min(clocks)
            for w in sorted(waiting):
                if staleness is None or clocks[w] - slowest <= staleness:
                    # Its next gradient lands about as late as its last did; after its last
                    # push it only evaluates, at the values themselves.
                    ahead = applied[w] if clocks[w] < self.total_steps else 0
                    sent = correction.sent(values, previous=previous, staleness=ahead)
                    if w in sending:  # long sent: the worker pushed after receiving it
                        sending.pop(w)()
                    reply = replies[w]
                    reply[: values.numel()].copy_(sent)
                    _stamp(reply, clocks, applied[w])
                    sending[w] = link.start_send((reply,), dst=w, tag=PULL)
                    pulled_at[w], held[w] = update + 1, reply[: values.numel()]
                    waiting.discard(w)
            if after_update is not None:
                after_update(values)
        assert not waiting, "every worker got its last parameters"
        for wait in sending.values():
            wait()
