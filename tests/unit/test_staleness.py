"""The staleness corrections' arithmetic: each is exactly no correction at zero staleness."""

from __future__ import annotations

import pytest
import torch

from gradsync.algorithms.staleness import (
    adjusted_momentum,
    delay_compensated,
    implicit_momentum,
)


def test_no_staleness_leaves_the_momentum_and_the_gradient_exactly_as_they_are():
    assert adjusted_momentum(0.9, 0) == 0.9
    grad = torch.randn(1000, dtype=torch.float64)
    weights = torch.randn(1000, dtype=torch.float64)
    assert torch.equal(delay_compensated(grad, now=weights, then=weights.clone(), lam=0.04), grad)


def test_asynchrony_of_m_workers_adds_one_minus_one_over_m():
    # M asynchronous workers: a gradient is M - 1 updates old on average (Mitliagkas et al.).
    for workers in (2, 4, 8):
        assert implicit_momentum(workers - 1) == pytest.approx(1 - 1 / workers)
    assert adjusted_momentum(0.9, 1) == pytest.approx(0.4)
    assert adjusted_momentum(0.5, 3) == 0.0  # nothing left to lower
    with pytest.raises(ValueError, match="staleness must be >= 0"):
        implicit_momentum(-1)


def test_delay_compensation_moves_a_quadratic_s_gradient_to_the_new_weights():
    # f(w) = Σ a_i w_i² / 2 has g = a ⊙ w and Hessian diag(a). Where λ·g⊙g equals that
    # diagonal (weights chosen so: g_i² = a_i / λ), the compensated stale gradient is the
    # gradient at the new weights exactly.
    lam = 0.5
    a = torch.tensor([0.5, 2.0, 1.0], dtype=torch.float64)
    then = (1 / (lam * a)).sqrt()
    now = then + torch.tensor([-0.2, 0.1, -0.5], dtype=torch.float64)
    stale = a * then
    assert torch.allclose(delay_compensated(stale, now=now, then=then, lam=lam), a * now)
    assert not torch.allclose(stale, a * now)  # uncorrected, it is off
