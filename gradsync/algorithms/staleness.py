"""Corrections for a gradient applied ``staleness`` updates after the weights it was computed
at (``scheduler.staleness_correction``). Each is exactly no correction at zero staleness.

* ``momentum`` (Mitliagkas, Zhang, Hadjis, Ré, "Asynchrony begets momentum", 2016): applying
  gradients late acts as extra momentum, 1 − 1/M for M asynchronous workers, whose staleness
  is M − 1 updates on average, so τ/(τ+1) for a staleness of τ. The optimizer's own momentum is
  lowered by that much, so that the two together stay at the momentum asked for.
* ``dc`` (Zheng et al., "Asynchronous SGD with delay compensation", 2017): the gradient at the
  weights it is applied to, to first order, with the Hessian approximated by λ·g⊙g:
  g + λ·g⊙g⊙(w_now − w_then).
* ``lr`` (Zhang, Gupta, Lian, Liu, "Staleness-aware async-SGD", IJCAI 2016): a gradient τ
  updates late is applied with the learning rate divided by τ + 1 (the paper divides by τ,
  counting a fresh gradient as τ = 1), so the stale gradients that would push the weights
  furthest from where they were computed push the least.
* ``predict`` (weight prediction: Chen et al., "Efficient and robust parallel DNN training
  through model parallelism on multi-GPU platform" (SpecTrain), 2018): a gradient that will be
  applied τ updates later is computed at the weights expected then, w + τ·(w − w_previous),
  extrapolated along the last update (for SGD, −τ·lr·v with v its momentum buffer), so that it
  is close to fresh when it lands.
"""

from __future__ import annotations

import numpy as np
from torch import Tensor


def implicit_momentum(staleness: float) -> float:
    """The momentum that applying gradients ``staleness`` updates late adds: τ/(τ+1)."""
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    return staleness / (staleness + 1)


def adjusted_momentum(momentum: float, staleness: float) -> float:
    """The optimizer's momentum that, with the implicit momentum of ``staleness``, makes
    ``momentum`` (never below 0: more staleness than momentum to cancel is left as it is)."""
    return max(0.0, momentum - implicit_momentum(staleness))


def staleness_aware_lr_scale(staleness: float) -> float:
    """What the learning rate of a gradient ``staleness`` updates late is multiplied by."""
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    return 1 / (staleness + 1)


def predicted_weights(now: Tensor, *, previous: Tensor, staleness: float) -> Tensor:
    """The weights ``staleness`` updates after ``now`` if each moves as the last one did (from
    ``previous`` to ``now``)."""
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    return now + staleness * (now - previous)


def delay_compensated(grad: Tensor, *, now: Tensor, then: Tensor, lam: float) -> Tensor:
    """DC-ASGD's gradient: ``grad`` (computed at ``then``) moved to the weights ``now``."""
    return grad + lam * grad * grad * (now - then)


def stable_limit(momentum: float, staleness: int) -> float:
    """The largest η·λ for which heavy-ball SGD (momentum μ) that applies each gradient
    ``staleness`` updates late converges on a quadratic of curvature λ.

    With g_t = λ·w_{t−τ}: w_{t+1} = (1 + μ)·w_t − μ·w_{t−1} − ηλ·w_{t−τ}, stable while every
    root of z^{τ+1} − (1 + μ)·z^τ + μ·z^{τ−1} + ηλ (τ ≥ 1) lies inside the unit circle:
    ηλ < 2(1 + μ) without staleness, 1 − μ at τ = 1 (found here by bisection)."""
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    if staleness == 0:
        return 2 * (1 + momentum)

    def stable(step: float) -> bool:
        coefficients = np.zeros(staleness + 2)
        coefficients[0], coefficients[1] = 1.0, -(1 + momentum)
        coefficients[2] += momentum
        coefficients[-1] += step
        return bool(np.all(np.abs(np.roots(coefficients)) < 1))

    low, high = 0.0, 2 * (1 + momentum)  # staleness only shrinks the range
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if stable(middle) else (low, middle)
    return low


def stability_warning(
    *, lr: float, momentum: float, staleness: int, curvature: float, corrected: bool
) -> str | None:
    """What to tell a user whose updates, ``staleness`` updates late at ``lr`` and
    ``momentum`` (already lowered when ``corrected``), leave the stable range for the
    ``curvature`` measured (one line), or None while they are inside it."""
    limit = stable_limit(momentum, staleness)
    if lr * curvature < limit:
        return None
    advice = f"lower trainer.lr below {limit / curvature:.3g}"
    if not corrected:
        lowered = adjusted_momentum(momentum, staleness)
        advice = (
            f"set scheduler.staleness_correction=momentum (momentum {lowered:g}, stable while "
            f"lr·λ < {stable_limit(lowered, staleness):.3g}), or {advice}"
        )
    return (
        f"updates applied {staleness} update(s) late with lr {lr:g} and momentum {momentum:g} "
        f"are stable only while lr·λ < {limit:.3g}, and the profiled steps measured a "
        f"curvature λ ≈ {curvature:.3g} (lr·λ = {lr * curvature:.3g}): training may stall or "
        f"diverge; {advice}"
    )
