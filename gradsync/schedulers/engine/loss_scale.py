"""fp16's dynamic loss scale as the exchange engine applies it (``trainer.precision=fp16``).

The loop scales the loss (``torch.amp.GradScaler``), so gradient hooks fire with scaled
gradients. Error feedback and compression must see the true gradient (a residual kept at one
scale is wrong at the next), so the engine unscales each group before it compensates it, and
notes on the device whether this worker met an inf or NaN. A small all-reduce (max) of that
flag, the step's last job on the communication thread, tells every worker whether any worker
did: a compressor may drop the inf, so the exchanged gradients alone would not.

The written-back average is then scaled again (exactly: the scale is a power of two), or made
NaN where any worker overflowed, and ``GradScaler.step`` and ``update`` run as under DDP: every
worker finds the same, so all skip or all step, and the scale moves alike everywhere.
GradScaler reads its flag on the host once per step, the one host sync fp16 adds
(``HOST_SYNCS``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from gradsync.comm.host_sync import host_sync

HOST_SYNCS: Mapping[str, str] = {
    "amp.found_inf": "GradScaler.step reads the agreed overflow flag to skip or take the step",
}


class LossScale:
    def __init__(self, device: torch.device) -> None:
        self.scaler = torch.amp.GradScaler(device.type)
        self._device = device
        self._inverse: Tensor | None = None
        self._overflow: Tensor | None = None

    def scale(self, loss: Tensor) -> Tensor:
        return self.scaler.scale(loss)

    def _scale(self) -> Tensor:
        """The current scale as a 0-d tensor on the device (read without a host sync)."""
        return self.scaler.scale(torch.ones((), device=self._device))

    def overflow(self) -> Tensor:
        """This step's flag on this worker (1.0: an inf or NaN met so far), on the device."""
        if self._overflow is None:
            self._overflow = torch.zeros((), device=self._device)
            # As GradScaler computes it: the reciprocal in float64.
            self._inverse = self._scale().double().reciprocal().float()
        return self._overflow

    def unscale_(self, flat: Tensor) -> None:
        """Divide one group's gradient by the scale in place, noting an inf or NaN in it."""
        overflow = self.overflow()
        assert self._inverse is not None
        # GradScaler's own kernel: unscale and check in one pass.
        torch._amp_foreach_non_finite_check_and_unscale_([flat], overflow, self._inverse)

    def step(self, optimizer: Optimizer, overflow: Tensor) -> bool:
        """Step ``optimizer`` with its (averaged, unscaled) gradients unless ``overflow``, the
        flag agreed by every worker, is set; update the scale. True when it stepped."""
        params = (p for group in optimizer.param_groups for p in group["params"])
        grads = [p.grad for p in params if p.grad is not None]
        nan = torch.full((), float("nan"), device=self._device)
        # Scaled again, as GradScaler expects them; NaN where any worker overflowed.
        torch._foreach_mul_(grads, torch.where(overflow > 0, nan, self._scale()))
        stepped: list[bool] = []
        handle = optimizer.register_step_post_hook(lambda *_: stepped.append(True))
        try:
            with host_sync("amp.found_inf"):
                self.scaler.step(optimizer)
        finally:
            handle.remove()
        self.scaler.update()
        self._overflow = self._inverse = None
        return bool(stepped)

    def value(self) -> float:
        """The scale now (a host read: for logged metrics only)."""
        return self.scaler.get_scale()

    def state_dict(self) -> dict[str, Any]:
        return self.scaler.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.scaler.load_state_dict(dict(state))
