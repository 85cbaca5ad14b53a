"""``scheduler.staleness_correction`` as a scheduler that applies gradients late uses it: before
each update it is told how many updates old the gradient is (``staleness``) and, for ``dc``,
the weights it was computed at. The arithmetic is ``gradsync/algorithms/staleness.py``."""

from __future__ import annotations

from typing import Any

from torch import Tensor
from torch.optim import Optimizer

from gradsync.algorithms.staleness import (
    adjusted_momentum,
    delay_compensated,
    predicted_weights,
    stability_warning,
    staleness_aware_lr_scale,
)
from gradsync.schedulers.staleness_options import (
    DELAY_COMPENSATION,
    LEARNING_RATE,
    MOMENTUM,
    NONE,
    PREDICTION,
)

CONFIGURED_MOMENTUM = "configured_momentum"
LEAST_MOMENTUM = 1e-6
"""What a correction that would remove all momentum leaves (see ``prepare``)."""


class StalenessCorrection:
    def __init__(self, kind: str = NONE, *, dc_lambda: float, optimizer: Optimizer) -> None:
        self.kind, self.dc_lambda = kind, dc_lambda
        # The momentum each parameter group was configured with, what a correction aims at,
        # kept in the group itself: a checkpoint saves it with the lowered momentum, so an
        # optimizer restored before or after this is built still knows it.
        self._momenta = [
            float(group.setdefault(CONFIGURED_MOMENTUM, _momentum(group)))
            for group in optimizer.param_groups
        ]

    @property
    def remembers_weights(self) -> bool:
        """Whether ``gradient`` needs the weights each gradient was computed at."""
        return self.kind == DELAY_COMPENSATION

    @property
    def predicts(self) -> bool:
        """Whether ``sent`` needs the weights before the last update."""
        return self.kind == PREDICTION

    def sent(self, values: Tensor, *, previous: Tensor | None, staleness: float) -> Tensor:
        """The weights to compute a gradient at that will land ``staleness`` updates after
        ``values`` (``previous``: the weights before the last update)."""
        if not self.predicts or staleness == 0:
            return values
        assert previous is not None
        return predicted_weights(values, previous=previous, staleness=staleness)

    def gradient(self, grad: Tensor, *, now: Tensor | None, then: Tensor | None) -> Tensor:
        """The gradient to apply to the weights ``now``, computed at ``then``."""
        if not self.remembers_weights:
            return grad
        assert now is not None and then is not None
        return delay_compensated(grad, now=now, then=then, lam=self.dc_lambda)

    def stability_problem(self, *, lr: float, staleness: int, curvature: float) -> str | None:
        """Why updates ``staleness`` late at ``lr``, with this correction's momentum, may not
        converge at ``curvature`` (one line, with what to change), or None."""
        corrected = self.kind == MOMENTUM
        momentum = self._momenta[0]
        return stability_warning(
            lr=lr * self.lr_scale(staleness),
            momentum=adjusted_momentum(momentum, staleness) if corrected else momentum,
            staleness=staleness,
            curvature=curvature,
            corrected=corrected,
        )

    def lr_scale(self, staleness: float) -> float:
        """What the learning rate of an update ``staleness`` updates late is multiplied by."""
        return staleness_aware_lr_scale(staleness) if self.kind == LEARNING_RATE else 1.0

    def step(self, optimizer: Optimizer, staleness: float) -> None:
        """``optimizer.step()`` for gradients ``staleness`` updates late: with the momentum
        ``prepare`` sets and the learning rate ``lr_scale`` gives for that one step."""
        self.prepare(optimizer, staleness)
        scale = self.lr_scale(staleness)
        configured = [group["lr"] for group in optimizer.param_groups]
        for group in optimizer.param_groups:
            group["lr"] = group["lr"] * scale
        optimizer.step()
        for group, lr in zip(optimizer.param_groups, configured, strict=True):
            group["lr"] = lr  # the lr schedule, not this step's, is what a checkpoint keeps

    def prepare(self, optimizer: Optimizer, staleness: float) -> None:
        """Set the optimizer for an update ``staleness`` updates late."""
        if self.kind != MOMENTUM:
            return
        for group, momentum in zip(optimizer.param_groups, self._momenta, strict=True):
            if momentum == 0:  # nothing to lower: plain SGD stays plain SGD
                continue
            # Never exactly 0: SGD then skips its momentum buffer, and the next update with
            # momentum would resume from a stale one.
            lowered = max(adjusted_momentum(momentum, staleness), LEAST_MOMENTUM)
            _set_momentum(group, lowered)


def _momentum(group: dict[str, Any]) -> float:
    """SGD's momentum, or Adam's first beta (its momentum)."""
    return float(group["momentum"]) if "momentum" in group else float(group["betas"][0])


def _set_momentum(group: dict[str, Any], value: float) -> None:
    if "momentum" in group:
        group["momentum"] = value
    else:
        group["betas"] = (value, group["betas"][1])
