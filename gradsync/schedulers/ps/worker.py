"""``scheduler=ps_bsp``, ``asp``, ``ssp``: the workers' side of a parameter server. Each step a
worker pushes its gradient (one shard to each server, point to point) and waits for the
parameters the servers send back, which replace its own; it never steps an optimizer itself.
What the servers do with the gradients (average a step's, or apply each as it arrives, with or
without a staleness bound) is in ``server.py`` beside this; this side is the same for all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.optim import Optimizer

from gradsync.comm.membership import wait_all
from gradsync.schedulers.engine.buckets import Buckets
from gradsync.schedulers.engine.components import SyncComponents, flat_gradient, mark_stepped
from gradsync.schedulers.engine.group_info import bucket_parts
from gradsync.schedulers.ps.layout import CLOCKS, PULL, Shards
from gradsync.schedulers.ps.messages import send_payload
from gradsync.types import Compressor, GroupInfo, Payload, SyncStats


class PsSync(SyncComponents):
    def __init__(
        self,
        *,
        protocol: str = "bsp",
        staleness: int | None = None,
        parameter_server: bool = True,
        server: str | None = None,
        **components: Any,
    ) -> None:
        super().__init__(**components)
        self.protocol, self.staleness = protocol, staleness
        self.workers_in_lockstep = protocol == "bsp"
        self._params: list[nn.Parameter] = []
        self._shards: Shards | None = None
        self._optimizer: Optimizer | None = None

    def attach(self, model: nn.Module, optimizer: Optimizer) -> None:
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._optimizer = optimizer
        sizes = [p.numel() for p in self._params]
        self._shards = Shards.of_world(sum(sizes), self.collective.world_size)
        # Each shard's runs of tensors (model order), as compressors take a group's layout.
        shapes = [tuple(p.shape) for p in self._params]
        self._parts = bucket_parts(Buckets(self._shards.bounds), shapes, range(len(shapes)))

    def begin(self, *, step: int, epoch: int = 0) -> None:
        return None  # everything happens after backward

    def step(self, *, step: int, epoch: int = 0, loss: Tensor | None = None) -> SyncStats:
        shards = self._shards
        assert shards is not None and self._optimizer is not None, "attach() before step()"
        flat = flat_gradient(self._params)
        start = self.clock()
        pulled = [
            torch.empty(flat[shards.slice(s)].numel() + CLOCKS, dtype=flat.dtype)
            for s in range(shards.servers)
        ]
        pulls = [dist.irecv(pulled[s], src=shards.rank(s), tag=PULL) for s in range(shards.servers)]
        payloads = [
            self.compress_with_feedback(
                flat[shards.slice(s)],
                group=GroupInfo(
                    name=f"shard{s}",
                    step=step,
                    epoch=epoch,
                    parts=self._parts[s],
                    model_tensors=len(self._params),
                ),
            )
            for s in range(shards.servers)
        ]
        compressed = self.clock()
        agreeing = self.collective.busy_seconds()  # selection that talks among the workers
        pushed = sum(
            send_payload(payload, ctx, dst=shards.rank(s))
            for s, (payload, ctx) in enumerate(payloads)
        )
        wait_all(pulls)
        communicated = self.clock()
        new = torch.cat([p[:-CLOCKS] for p in pulled])
        offset = 0
        with torch.no_grad():
            for param in self._params:
                param.copy_(new[offset : offset + param.numel()].view_as(param))
                offset += param.numel()
        mark_stepped(self._optimizer)  # the servers stepped theirs
        slowest, fastest = (float(c) for c in pulled[0][-CLOCKS:])
        agreed = self.collective.take_bytes()  # what selection that talks sent
        return SyncStats(
            bytes_sent=pushed + agreed.payload,
            bytes_wire=pushed + agreed.wire,
            bytes_dense=flat.numel() * flat.element_size(),
            density_setup=self.compressor.density,
            density_actual=_density(self.compressor, payloads, flat.numel()),
            error_norm=self.feedback.norm(),
            time_compress=compressed - start - agreeing,
            time_comm=communicated - compressed + agreeing,
            time_update=self.clock() - communicated,
            extra={
                "sched/staleness": step + 1 - slowest,  # steps this worker is ahead
                "sched/staleness_max": fastest - slowest,  # the spread over all workers
            },
        )

    def state_dict(self) -> dict[str, Any]:
        return self.components_state()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.load_components_state(state)


def _density(compressor: Compressor, payloads: list[tuple[Payload, Any]], numel: int) -> float:
    """Elements whose values this worker pushed, over all elements."""
    selected = [compressor.selected(payload, ctx) for payload, ctx in payloads]
    if any(s is None for s in selected):
        return 1.0
    return sum(s.numel() for s in selected if s is not None) / numel
