"""``trainer.precision``: the arithmetic of the forward pass.

fp32 is training as it always was: no autocast, the loss differentiated as it is. bf16 and fp16
run the forward pass and the loss under ``torch.autocast`` on the worker's device type;
parameters, their gradients and the optimizer stay float32. fp16's narrow range needs a loss
scale, which the exchange engine applies (``LossScale``); bf16 has float32's range and needs
none.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from gradsync.config.schema import Precision
from gradsync.schedulers.engine import loss_scale
from gradsync.schedulers.engine.loss_scale import LossScale

_AUTOCAST = {Precision.bf16: torch.bfloat16, Precision.fp16: torch.float16}
LOSS_SCALE_METRIC = "train/loss_scale"


def precision_host_syncs(precision: Precision) -> Mapping[str, str]:
    """Where a step at ``precision`` waits on the host by design: fp16's loss scale."""
    return loss_scale.HOST_SYNCS if precision is Precision.fp16 else {}


class MixedPrecision:
    def __init__(self, precision: Precision, device: torch.device) -> None:
        self.precision = precision
        self.device = device
        self.loss_scale = LossScale(device) if precision is Precision.fp16 else None
        """Shared with the scheduler, which unscales and steps (fp16 only)."""

    def autocast(self) -> contextlib.AbstractContextManager[object]:
        """The context the forward pass and the loss run in."""
        dtype = _AUTOCAST.get(self.precision)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=dtype)

    def backward(self, loss: Tensor) -> None:
        (loss if self.loss_scale is None else self.loss_scale.scale(loss)).backward()

    def metrics(self) -> dict[str, float]:
        """For a logged window: the loss scale now (fp16), a host read."""
        return {} if self.loss_scale is None else {LOSS_SCALE_METRIC: self.loss_scale.value()}

    def state_dict(self) -> dict[str, Any]:
        return {} if self.loss_scale is None else {"loss_scale": self.loss_scale.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # A checkpoint of another precision has no scale to continue from: start afresh.
        if self.loss_scale is not None and "loss_scale" in state:
            self.loss_scale.load_state_dict(state["loss_scale"])
