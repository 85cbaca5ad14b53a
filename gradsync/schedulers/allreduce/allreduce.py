"""``scheduler=allreduce``: after backward, one exchange of the whole flattened gradient.

compensate -> compress -> remember what was not sent -> exchange (all-reduce when the
compressor's payloads add up, else all-gather) -> average -> optimizer step, all in ``step()``
(the engine's skeleton with a single group). Nothing overlaps with backward; ``scheduler=wfbp``
does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn
from torch.optim import Optimizer

from gradsync.schedulers.engine.engine import ExchangeEngine

_FLAT = "all"  # the name of the one flattened tensor this strategy compresses


class AllreduceSync(ExchangeEngine):
    def group_name(self, group: int) -> str:
        return _FLAT

    def attach(self, model: nn.Module, optimizer: Optimizer) -> None:
        super().attach(model, optimizer)
        self.use_plan((len(self._params),))  # every tensor, launched by step()

    def state_dict(self) -> dict[str, Any]:
        return self.components_state()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.load_components_state(state)
