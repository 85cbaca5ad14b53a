"""``feedback=residual``: e_{t+1} = (g_t + e_t) - transmitted_t, added back next step."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import Tensor

from gradsync.feedback.none import NoneFeedback
from gradsync.types import Compressor, ErrorFeedback


def for_compressor(compressor: Compressor) -> ErrorFeedback:
    """Residual memory, unless the compressor is lossless and would only ever leave zeros."""
    return NoneFeedback() if compressor.lossless else ResidualFeedback()


NORM_CHUNK = 4096


def _sum_of_squares(tensor: Tensor) -> Tensor:
    """Σx² in float64 without a float64 copy (which took 10% of a ResNet-18 iteration on
    shared cores): float32 norms of NORM_CHUNK-element rows, whose squares add in float64.
    One float32 norm of millions of elements is off by 4e-4; this is within 1e-8."""
    flat = tensor.detach().reshape(-1)
    whole = flat.numel() // NORM_CHUNK * NORM_CHUNK
    rows: Tensor = torch.linalg.vector_norm(flat[:whole].view(-1, NORM_CHUNK), dim=1).double()
    rest: Tensor = torch.linalg.vector_norm(flat[whole:]).double()
    return (rows * rows).sum() + rest * rest


def memory_norm(tensors: Iterable[Tensor]) -> Tensor:
    """The L2 norm of all of ``tensors`` together, a 0-d tensor where the first lives (0 for
    none). Tensors on other devices (state restored on the host, not yet moved) are summed
    there and their 0-d sums brought over."""
    squares = [_sum_of_squares(t) for t in tensors]
    if not squares:
        return torch.zeros(())
    device = squares[0].device
    return torch.stack([s.to(device) for s in squares]).sum().sqrt()


class ResidualFeedback:
    remembers = True

    def __init__(self) -> None:
        self._residuals: dict[str, Tensor] = {}
        self._made: dict[str, Tensor] = {}
        """What ``compensate`` returned as a new tensor, until the group's update: only this
        object holds it, so ``forget_sent`` may write into it."""

    def compensate(self, grad: Tensor, *, name: str, in_place: bool = False) -> Tensor:
        residual = self._residuals.get(name)
        if residual is None:
            if in_place:  # the caller's scratch: forget_sent may write into it
                self._made[name] = grad
            return grad
        if residual.device != grad.device:  # restored from a checkpoint on the CPU
            residual = self._residuals[name] = residual.to(grad.device)
        made = self._made[name] = grad.add_(residual) if in_place else grad + residual
        return made

    def update(self, compensated: Tensor, transmitted: Tensor, *, name: str) -> None:
        self._made.pop(name, None)
        self._residuals[name] = compensated - transmitted

    def forget_sent(self, compensated: Tensor, sent: Tensor, *, name: str) -> None:
        # The residual is the compensated gradient less what was sent, that is with the sent
        # indices zeroed: written in place, a dense step of this size costs fresh pages on
        # every allocation of a CPU worker (a dense transmitted copy and a difference each took
        # 40 ms of a ResNet-18 step). The caller's own tensor (no residual yet) is copied.
        owned = self._made.pop(name, None) is compensated
        residual = compensated if owned else compensated.clone()
        residual[sent] = 0
        self._residuals[name] = residual

    def norm(self) -> Tensor:
        return memory_norm(self._residuals.values())

    def state_dict(self) -> dict[str, Tensor]:
        return {name: r.detach().cpu().clone() for name, r in self._residuals.items()}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self._residuals = {name: r.clone() for name, r in state.items()}

    def residuals(self) -> dict[str, Tensor]:
        return dict(self._residuals)

    def replace_residuals(self, residuals: Mapping[str, Tensor]) -> None:
        self._residuals = dict(residuals)

    def snapshot(self) -> object:
        # ``update`` replaces a residual and never writes into one, so holding the current
        # tensors keeps them as they are: no copy.
        return dict(self._residuals)

    def restore(self, snapshot: object) -> None:
        assert isinstance(snapshot, dict)
        self._residuals = dict(snapshot)
