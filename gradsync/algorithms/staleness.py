"""Corrections for a gradient applied ``staleness`` updates after the weights it was computed
at (``scheduler.staleness_correction``). Each is exactly no correction at zero staleness.

* ``momentum`` (Mitliagkas, Zhang, Hadjis, Ré, "Asynchrony begets momentum", 2016): applying
  gradients late acts as extra momentum, 1 − 1/M for M asynchronous workers, whose staleness
  is M − 1 updates on average, so τ/(τ+1) for a staleness of τ. The optimizer's own momentum is
  lowered by that much, so that the two together stay at the momentum asked for.
* ``dc`` (Zheng et al., "Asynchronous SGD with delay compensation", 2017): the gradient at the
  weights it is applied to, to first order, with the Hessian approximated by λ·g⊙g:
  g + λ·g⊙g⊙(w_now − w_then).
"""

from __future__ import annotations

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


def delay_compensated(grad: Tensor, *, now: Tensor, then: Tensor, lam: float) -> Tensor:
    """DC-ASGD's gradient: ``grad`` (computed at ``then``) moved to the weights ``now``."""
    return grad + lam * grad * grad * (now - then)
