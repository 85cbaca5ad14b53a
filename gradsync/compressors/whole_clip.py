"""DGC's local gradient clipping (§3.3) by one norm over all of a worker's gradient, whatever
the groups a scheduler hands over.

The paper rescales a worker's gradient when "the sum of the L2-norms" exceeds the threshold,
after Pascanu et al.: one norm over every tensor, ‖g‖₂ of the whole flattened gradient. A group
that holds every tensor of the model whole (``scheduler=allreduce``, ``ps_bsp`` with one
server) is that gradient, so its own norm is used: the paper's rule exactly. A scheduler that
sends groups while backward still runs (``wfbp``, ``lags``, the priority schedulers) compresses
its first groups before the rest of the gradient exists, so their coefficient comes from the
previous step's whole gradient, summed from every group compressed in that step; on the first
step there is none, and each group is clipped by its own norm. Everything stays on the device:
no host synchronization.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradsync.compressors.fused import fused
from gradsync.types import GroupInfo

CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s guard against a zero norm


@fused
def clip_coefficient(norm: Tensor, max_norm: float) -> Tensor:
    """min(1, max_norm / norm) as a 0-d tensor (no host sync; one kernel on a GPU)."""
    coefficient: Tensor = (max_norm / (norm + CLIP_EPS)).clamp(max=1.0)
    return coefficient


@fused
def previous_coefficient(previous: Tensor, norm: Tensor, max_norm: float) -> Tensor:
    """``clip_coefficient`` of the previous step's whole gradient, whose sum of squares is
    ``previous``; of the group's own ``norm`` while that is not finite (the first steps
    overflowed under fp16). One kernel on a GPU."""
    return clip_coefficient.eager(torch.where(previous.isfinite(), previous.sqrt(), norm), max_norm)


@fused
def finite_or(squares: Tensor, previous: Tensor) -> Tensor:
    """``squares`` where finite, else ``previous`` (one kernel on a GPU)."""
    return torch.where(squares.isfinite(), squares, previous)


def holds_whole_model(group: GroupInfo) -> bool:
    """Whether ``group`` is every tensor of the model, whole (or its layout is unknown)."""
    if not group.parts:
        return True
    return len(group.parts) == group.model_tensors and all(part.whole for part in group.parts)


class WholeGradientClip:
    """The clipping coefficient of each group, from the norm of the whole gradient."""

    def __init__(self) -> None:
        self._step: int | None = None
        self._squares: Tensor | None = None
        """Sum of squares of this step's groups so far."""
        self._previous: Tensor | None = None
        """The previous step's whole-gradient sum of squares (a finite one)."""

    def coefficient(self, flat: Tensor, group: GroupInfo, max_norm: float) -> Tensor:
        norm = torch.linalg.vector_norm(flat)
        if group.step != self._step:
            self._close_step()
            self._step = group.step
        squares = norm.square()
        self._squares = squares if self._squares is None else self._squares + squares
        if holds_whole_model(group) or self._previous is None:
            return clip_coefficient(norm, max_norm)
        self._previous = self._previous.to(norm.device)  # restored from a checkpoint on the CPU
        return previous_coefficient(self._previous, norm, max_norm)

    def _close_step(self) -> None:
        squares, self._squares = self._squares, None
        if squares is None:
            return
        if self._previous is None:
            self._previous = squares
        else:  # an fp16 step that overflowed (and was skipped) keeps the last finite norm
            self._previous = finite_or(squares, self._previous.to(squares.device))

    # ---- checkpoints: a resumed run clips its first step as the uninterrupted one ------------
    def state(self) -> Tensor | None:
        """The previous step's whole-gradient sum of squares, once this step is closed."""
        self._close_step()
        self._step = None
        return self._previous

    def restore(self, previous: Tensor | None) -> None:
        self._step, self._squares, self._previous = None, None, previous
