"""``scheduler=ps_bsp``, ``asp``, ``ssp``: the workers' side of a parameter server. Each step a
worker pushes its gradient (one shard to each server, point to point) and waits for the
parameters the servers send back, which replace its own; it never steps an optimizer itself.
What the servers do with the gradients (average a step's, or apply each as it arrives, with or
without a staleness bound) is in ``server.py`` beside this; this side is the same for all.

Each shard is a bucket of the engine's contract (``engine/exchange.py``): compressed with error
feedback by ``exchange``, pushed by this side's ``Send``, and its future gives the server's new
values of the shard. A server replies only once it has the pushes it waits for, so the replies
are received after the step's last push, in server order, one operation at a time.

On a GPU the gradient is compressed (with error feedback) on the device; only the pushed
payloads go to the host (on the communication thread's stream), and only the pulled parameters
come back to the device (``host.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from typing_extensions import Unpack

from gradsync.schedulers.engine.buckets import Buckets
from gradsync.schedulers.engine.comm_thread import CommThread, Job
from gradsync.schedulers.engine.components import SyncComponents, flat_gradient, mark_stepped
from gradsync.schedulers.engine.engine import EngineParts
from gradsync.schedulers.engine.exchange import Bucket, Exchanged
from gradsync.schedulers.engine.group_info import bucket_parts
from gradsync.schedulers.engine.queued_collective import AGREE
from gradsync.schedulers.engine.step_timer import StepTimer
from gradsync.schedulers.ps.host import host_empty, to_device
from gradsync.schedulers.ps.layout import PULL, STAMPS, Shards
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
        self._params: list[nn.Parameter] = []
        self._shards: Shards | None = None
        self._optimizer: Optimizer | None = None
        self._comm: CommThread | None = None
        self._timer: StepTimer | None = None
        self._servers: Collective = self.collective
        """After ``attach``: every rank of the job, for the pushes and pulls."""
        self._pushes: list[Job[None]] = []
        self._replies: Job[tuple[list[float], list[Tensor]]] | None = None
        """This step's pushes, and (once the first shard's reply is waited for) the job that
        receives every server's reply."""

    def attach(self, model: nn.Module, optimizer: Optimizer) -> None:
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._optimizer = optimizer
        self._comm, self._timer = self.start_comm(self._params[0].device)
        self._servers = self.collective.world()
        sizes = [p.numel() for p in self._params]
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
        flat = flat_gradient(self._params)
        start = timer.mark()
        self._pushes, self._replies = [], None
        exchanged = [
            self.exchange(
                Bucket(s, flat[shards.slice(s)], self._shard_info(s, step, epoch)), self._push
            )
            for s in range(shards.servers)
        ]
        compressed = timer.mark()
        new = torch.cat([shard.wait() for shard in exchanged])
        assert self._replies is not None
        (slowest, fastest, applied), _ = self._replies.wait()
        communicated = timer.mark()
        offset = 0
        with torch.no_grad():
            for param in self._params:
                param.copy_(new[offset : offset + param.numel()].view_as(param))
                offset += param.numel()
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

    def _shard_info(self, shard: int, step: int, epoch: int) -> GroupInfo:
        return GroupInfo(
            name=f"shard{shard}",
            step=step,
            epoch=epoch,
            parts=self._parts[shard],
            model_tensors=len(self._params),
        )

    def _push(self, bucket: Bucket, payload: Payload, ctx: Any) -> Callable[[], Tensor]:
        """The parameter servers' ``Send``: the shard pushed to its server by the
        communication thread; the future gives the shard's new values, on its device."""
        assert self._comm is not None and self._shards is not None, "attach() first"
        dst = self._shards.rank(bucket.index)
        push = partial(send_payload, self._servers, payload, ctx, dst=dst)
        self._pushes.append(self._comm.submit(push, inputs=payload))
        return partial(self._reply, bucket.index, bucket.gradient)

    def _reply(self, shard: int, like: Tensor) -> Tensor:
        """Shard ``shard``'s reply. The first one waited for in a step hands the communication
        thread the receiving of every reply, once every push has gone (a failed push is
        raised here, not waited for as a reply that never comes)."""
        if self._replies is None:
            assert self._comm is not None
            for pushed in self._pushes:
                pushed.wait()
            receive = partial(self._receive_replies, like.dtype, like.device)
            self._replies = self._comm.submit(receive)
        _, values = self._replies.wait()
        return values[shard]

    def _receive_replies(
        self, dtype: torch.dtype, device: torch.device
    ) -> tuple[list[float], list[Tensor]]:
        """On the communication thread: every server's reply, in server order. The stamps
        that end each (``layout.STAMPS``: the slowest and the fastest worker's clock, and the
        staleness this worker's gradient was applied with), read from the first on the host
        where it landed, and each shard's new values on ``device``."""
        shards = self._shards
        assert shards is not None
        replies = []
        for s in range(shards.servers):
            size = shards.bounds[s + 1] - shards.bounds[s] + STAMPS
            reply = host_empty(size, dtype)
            self._servers.recv((reply,), src=shards.rank(s), tag=PULL)
            replies.append(reply)
        stamps = replies[0][-STAMPS:].tolist()
        return stamps, [to_device(reply[:-STAMPS], device) for reply in replies]

    def state_dict(self) -> dict[str, Any]:
        return self.components_state()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.load_components_state(state)


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
