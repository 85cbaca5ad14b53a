"""``scheduler=allreduce``: after backward, one exchange of the whole flattened gradient.

The template every flat strategy follows: compensate -> compress -> remember what was not sent
-> exchange (all-reduce when the compressor's payloads add up, else all-gather) -> average ->
optimizer step. Nothing here overlaps with backward; ``scheduler=wfbp`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor, nn
from torch.optim import Optimizer

from gradsync.schedulers.engine.combine import combine
from gradsync.schedulers.engine.components import SyncComponents, flat_gradient
from gradsync.types import Payload, SyncStats

_FLAT = "all"  # the name of the one flattened tensor this strategy compresses


class AllreduceSync(SyncComponents):
    def __init__(self, **components: Any) -> None:
        super().__init__(**components)
        self._params: list[nn.Parameter] = []
        self._sizes: list[int] = []
        self._optimizer: Optimizer | None = None

    def attach(self, model: nn.Module, optimizer: Optimizer) -> None:
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._sizes = [p.numel() for p in self._params]
        self._optimizer = optimizer

    def begin(self, *, step: int, epoch: int = 0) -> None:
        return None  # everything happens after backward

    def _flat_grad(self) -> Tensor:
        return flat_gradient(self._params)

    def _write_grad(self, flat: Tensor) -> None:
        offset = 0
        for p in self._params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p)
            offset += n

    def step(self, *, step: int, epoch: int = 0, loss: Tensor | None = None) -> SyncStats:
        assert self._optimizer is not None, "attach() before step()"
        start = self.clock()
        flat = self._flat_grad()
        payload, ctx = self.compress_with_feedback(
            flat, name=_FLAT, step=step, epoch=epoch, sizes=self._sizes
        )
        compressed = self.clock()
        # Time a compressor spent talking while it selected (index exchange) is communication.
        agreeing = self.collective.busy_seconds()

        n = self.collective.world_size
        received: Payload | list[Payload]
        if self.compressor.allreducible:
            received = self.collective.all_reduce(payload)
        else:
            received = self.collective.all_gather(payload)
        reduced, selected = combine(self.compressor, received, ctx, like=flat)
        communicated = self.clock()

        self._write_grad(reduced.div_(n))
        self._optimizer.step()
        updated = self.clock()

        count = self.collective.take_bytes()
        numel = flat.numel()
        return SyncStats(
            bytes_sent=count.payload,
            bytes_wire=count.wire,
            bytes_dense=numel * flat.element_size(),
            density_setup=self.compressor.density,
            density_actual=1.0 if selected is None else selected.numel() / numel,
            error_norm=self.feedback.norm(),
            time_compress=compressed - start - agreeing,
            time_comm=communicated - compressed + agreeing,
            time_update=updated - communicated,
        )

    def state_dict(self) -> dict[str, Any]:
        return {"feedback": self.feedback.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.feedback.load_state_dict(state["feedback"])
