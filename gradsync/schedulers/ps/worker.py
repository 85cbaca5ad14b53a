"""``scheduler=ps_bsp``, ``asp``, ``ssp``: the workers' side of a parameter server. Each step a
worker pushes its gradient (one shard to each server, point to point) and waits for the
parameters the servers send back, which replace its own; it never steps an optimizer itself.
What the servers do with the gradients (average a step's, or apply each as it arrives, with or
without a staleness bound) is in ``server.py`` beside this; this side is the same for all.

Each shard is a bucket of the engine's contract (``engine/exchange.py``): compressed with error
feedback by ``exchange`` and handed to this side's ``Send``; its future gives the server's new
values of the shard. Once every shard is compressed, one job of the communication thread
pushes them all and then receives every reply, in server order, one operation at a time (a
server replies only once it has the pushes it waits for).

On a GPU the gradient is compressed (with error feedback) on the device; only the pushed
payloads go to the host (on the communication thread's stream), and only the pulled parameters
come back to the device (``host.Staging``). Every buffer a step passes through is made at the
first step and reused: the flat gradient, each shard's pinned push, the pinned reply and its
copy on the device. On the CPU nothing is staged: a push is sent from the flat gradient, and
the servers' replies land end to end in one buffer that the parameters are copied from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from typing_extensions import Unpack

from gradsync.schedulers.engine.buckets import Buckets
from gradsync.schedulers.engine.comm_thread import CommThread, Job
from gradsync.schedulers.engine.components import SyncComponents, copy_gradients, mark_stepped
from gradsync.schedulers.engine.engine import EngineParts
from gradsync.schedulers.engine.exchange import Bucket, Exchanged
from gradsync.schedulers.engine.group_info import bucket_parts
from gradsync.schedulers.engine.queued_collective import AGREE
from gradsync.schedulers.engine.step_timer import StepTimer
from gradsync.schedulers.ps.host import Staging
from gradsync.schedulers.ps.layout import PULL, STAMPS, Shards, shaped
from gradsync.schedulers.ps.messages import send_payload
from gradsync.types import Collective, Compressor, GroupInfo, Payload, SyncStats


class PsSync(SyncComponents):
    def __init__(
        self,
        *,
        staleness: int | None = None,
        server: str | None = None,
        staleness_correction: str | None = None,
        dc_lambda: float | None = None,
        **parts: Unpack[EngineParts],
    ) -> None:
        # The options are the servers' (server.py: how long a worker may run ahead, what to do
        # about stale gradients): a worker's side is the same.
        super().__init__(**parts)
        self._params: list[Tensor] = []
        self._shards: Shards | None = None
        self._optimizer: Optimizer | None = None
        self._comm: CommThread | None = None
        self._timer: StepTimer | None = None
        self._staging: Staging | None = None
        self._flat = torch.empty(0)
        """After ``attach``: the flat gradient, made once (each step's is copied into it)."""
        self._grads: list[Tensor] = []
        """Each parameter's view of ``_flat``."""
        self._servers: Collective = self.collective
        """After ``attach``: every rank of the job, for the pushes and pulls."""

    def attach(self, model: nn.Module, optimizer: Optimizer) -> None:
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._optimizer = optimizer
        self._comm, self._timer = self.start_comm(self._params[0].device)
        self._servers = self.collective.world()
        sizes = [p.numel() for p in self._params]
        first = self._params[0]
        self._staging = Staging(first.device)
        self._flat = torch.empty(sum(sizes), dtype=first.dtype, device=first.device)
        self._grads = shaped(self._flat, self._params)
        workers = self.collective.world_size
        self._shards = Shards.even(sum(sizes), self._servers.world_size - workers, workers)
        # Each shard's runs of tensors (model order), as compressors take a group's layout.
        shapes = [tuple(p.shape) for p in self._params]
        self._parts = bucket_parts(Buckets(self._shards.bounds), shapes, range(len(shapes)))

    def begin(self, *, step: int, epoch: int = 0) -> None:
        return None  # everything happens after backward

    def step(self, *, step: int, epoch: int = 0, loss: Tensor | None = None) -> SyncStats:
        shards, timer = self._shards, self._timer
        assert shards is not None and timer is not None, "attach() first"
        assert self._optimizer is not None
        flat = self._flat
        # Read by this step's pushes only: the next step writes into it after the servers
        # replied (the communication thread's job is waited for below).
        copy_gradients(self._params, self._grads)
        start = timer.mark()
        push_pull = _PushPull(self)
        exchanged = [
            self.exchange(
                Bucket(s, flat[shards.slice(s)], self._shard_info(s, step, epoch)), push_pull.send
            )
            for s in range(shards.servers)
        ]
        compressed = timer.mark()
        for shard in exchanged:  # each server's new values of its shard: views of ``new``
            shard.wait()
        (slowest, fastest, applied), new = push_pull.received(flat)
        communicated = timer.mark()
        with torch.no_grad():  # one batched copy, not a launch per tensor
            torch._foreach_copy_(self._params, shaped(new, self._params))
        mark_stepped(self._optimizer)  # the servers stepped theirs
        timer.add("compress", start, compressed)
        timer.add("comm", compressed, communicated)
        timer.add("update", communicated, timer.mark())
        seconds = timer.read()
        pushed = self._servers.take_bytes()
        agreed = self.collective.take_bytes()  # what selection that talks sent
        return SyncStats(
            bytes_sent=pushed.payload + agreed.payload,
            bytes_wire=pushed.wire + agreed.wire,
            bytes_dense=flat.numel() * flat.element_size(),
            density_setup=self.compressor.density_at(epoch),
            density_actual=_density(self.compressor, exchanged, flat.numel()),
            error_norm=self.memory_norm(),
            # A compressor waiting for the workers to agree (AGREE) is communicating.
            time_compress=seconds["compress"] - seconds[AGREE],
            time_comm=seconds["comm"] + seconds[AGREE],
            time_update=seconds["update"],
            extra={
                "sched/staleness": step + 1 - slowest,  # steps this worker is ahead
                "sched/staleness_max": fastest - slowest,  # the spread over all workers
                # Updates the (first) server applied between this worker's previous pull and
                # its gradient: what a staleness correction corrects for.
                "sched/applied_staleness": applied,
            },
        )

    def shard_slice(self, shard: int) -> slice:
        assert self._shards is not None, "attach() first"
        return self._shards.slice(shard)

    def _shard_info(self, shard: int, step: int, epoch: int) -> GroupInfo:
        return GroupInfo(
            name=f"shard{shard}",
            step=step,
            epoch=epoch,
            parts=self._parts[shard],
            model_tensors=len(self._params),
        )

    def _push_pull(
        self, pushes: list[tuple[Payload, Any]], dtype: torch.dtype
    ) -> tuple[list[float], Tensor]:
        """On the communication thread: every shard pushed to its server, then the parameters
        each sends back, in server order, one operation at a time (a server replies only once
        it has the pushes it waits for). The stamps that end each reply (``layout.STAMPS``:
        the slowest and the fastest worker's clock, and the staleness this worker's gradient
        was applied with), read from the first reply in host memory, where gloo wrote it (no
        device is waited for); and the new flat parameters on the worker's device.

        The replies land end to end in one buffer: server s's shard, then its stamps, where
        server s + 1's shard lands next (the first server's stamps are read before); the last
        server's stamps stay past the end of the parameters."""
        shards, staging = self._shards, self._staging
        assert shards is not None and staging is not None
        for s, (payload, ctx) in enumerate(pushes):
            staged = staging.outgoing(("push", s), payload)
            send_payload(self._servers, staged, ctx, dst=shards.rank(s))
        total = shards.bounds[-1]
        pulled = staging.landing("pull", total + STAMPS, dtype)
        stamps: list[float] = []
        for s in range(shards.servers):
            reply = pulled[shards.bounds[s] : shards.bounds[s + 1] + STAMPS]
            self._servers.recv((reply,), src=shards.rank(s), tag=PULL)
            if s == 0:
                stamps = reply[-STAMPS:].tolist()
        return stamps, staging.arrived("pull", pulled[:total])

    def state_dict(self) -> dict[str, Any]:
        return self.components_state()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.load_components_state(state)


@dataclass
class _PushPull:
    """One step's exchange with the servers, the shards its ``send`` (the parameter servers'
    ``Send``) was given: pushed and answered by one job of the communication thread, handed
    over when the first shard's future is waited for, once every shard is compressed."""

    worker: PsSync
    pushes: list[tuple[Payload, Any]] = field(default_factory=list)
    job: Job[tuple[list[float], Tensor]] | None = None

    def send(self, bucket: Bucket, payload: Payload, ctx: Any) -> Callable[[], Tensor]:
        self.pushes.append((payload, ctx))
        return partial(self.reply, bucket.index, bucket.gradient)

    def reply(self, shard: int, like: Tensor) -> Tensor:
        """The server's new values of ``shard``, on ``like``'s device (a view of them all)."""
        _, new = self.received(like)
        return new[self.worker.shard_slice(shard)]

    def received(self, like: Tensor) -> tuple[list[float], Tensor]:
        """The stamps and the new flat parameters (``PsSync._push_pull``)."""
        if self.job is None:
            comm = self.worker._comm
            assert comm is not None, "attach() first"
            pushes = self.pushes
            work = partial(self.worker._push_pull, pushes, like.dtype)
            self.job = comm.submit(work, inputs=[payload for payload, _ in pushes])
        return self.job.wait()


class StalePsSync(PsSync):
    """``asp`` and ``ssp``: the same worker side, but the servers answer each worker on its own
    (``server.serve_stale``), so workers do not take their steps together."""

    workers_in_lockstep = False


def _density(compressor: Compressor, pushed: list[Exchanged[Tensor]], numel: int) -> float:
    """Elements whose values this worker pushed, over all elements."""
    selected = [compressor.selected(shard.payload, shard.ctx) for shard in pushed]
    if any(s is None for s in selected):
        return 1.0
    return sum(s.numel() for s in selected if s is not None) / numel
