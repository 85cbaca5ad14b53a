"""The staleness corrections' arithmetic: each is exactly no correction at zero staleness."""

from __future__ import annotations

import math

import pytest
import torch

from gradsync.algorithms.staleness import (
    adjusted_momentum,
    delay_compensated,
    implicit_momentum,
    predicted_weights,
    stability_warning,
    stable_limit,
    staleness_aware_lr_scale,
)
from gradsync.jobs.compose import compose_jobs
from gradsync.schedulers.engine.staleness import StalenessCorrection


def test_no_staleness_leaves_the_momentum_and_the_gradient_exactly_as_they_are():
    assert adjusted_momentum(0.9, 0) == 0.9
    assert staleness_aware_lr_scale(0) == 1.0
    grad = torch.randn(1000, dtype=torch.float64)
    weights = torch.randn(1000, dtype=torch.float64)
    assert torch.equal(delay_compensated(grad, now=weights, then=weights.clone(), lam=0.04), grad)
    assert torch.equal(predicted_weights(weights, previous=grad, staleness=0), weights)


def test_asynchrony_of_m_workers_adds_one_minus_one_over_m():
    # M asynchronous workers: a gradient is M - 1 updates old on average (Mitliagkas et al.).
    for workers in (2, 4, 8):
        assert implicit_momentum(workers - 1) == pytest.approx(1 - 1 / workers)
    assert adjusted_momentum(0.9, 1) == pytest.approx(0.4)
    assert adjusted_momentum(0.5, 3) == 0.0  # nothing left to lower
    with pytest.raises(ValueError, match="staleness must be >= 0"):
        implicit_momentum(-1)


def test_a_stale_gradient_s_learning_rate_shrinks_with_its_staleness():
    assert [staleness_aware_lr_scale(t) for t in (1, 3)] == [0.5, 0.25]
    with pytest.raises(ValueError, match="staleness must be >= 0"):
        staleness_aware_lr_scale(-1)


def test_prediction_extrapolates_the_last_update_as_far_as_the_staleness():
    previous = torch.tensor([1.0, -2.0, 0.5])
    now = torch.tensor([0.5, -1.0, 0.5])  # the last update moved by (-0.5, 1, 0)
    assert torch.equal(
        predicted_weights(now, previous=previous, staleness=3), torch.tensor([-1.0, 2.0, 0.5])
    )
    with pytest.raises(ValueError, match="staleness must be >= 0"):
        predicted_weights(now, previous=previous, staleness=-1)


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


def test_the_stable_range_of_delayed_heavy_ball_matches_its_closed_forms():
    # No delay: ηλ < 2(1 + μ). One update late: ηλ < 1 − μ. Plain SGD τ late:
    # ηλ < 2·sin(π / (2(2τ + 1))).
    assert stable_limit(0.9, 0) == pytest.approx(3.8)
    for momentum in (0.0, 0.4, 0.9):
        assert stable_limit(momentum, 1) == pytest.approx(1 - momentum, abs=1e-9)
    for staleness in (1, 2, 3, 5):
        expected = 2 * math.sin(math.pi / (2 * (2 * staleness + 1)))
        assert stable_limit(0.0, staleness) == pytest.approx(expected, abs=1e-9)
    assert stable_limit(0.9, 2) < stable_limit(0.9, 1)  # staleness only shrinks it


def test_the_warning_names_the_bound_the_curvature_and_what_to_change():
    # The DeFT parity recipe: lr 0.05, momentum 0.9, curvature ≈ 10, one update late.
    message = stability_warning(lr=0.05, momentum=0.9, staleness=1, curvature=10, corrected=False)
    assert message is not None and "\n" not in message
    assert "lr·λ < 0.1" in message and "staleness_correction=momentum (momentum 0.4" in message
    assert "lower trainer.lr below 0.01" in message
    # Lowered to 0.4 by the correction, the same step is inside the range.
    assert (
        stability_warning(lr=0.05, momentum=0.4, staleness=1, curvature=10, corrected=True) is None
    )
    corrected = stability_warning(lr=0.1, momentum=0.4, staleness=1, curvature=10, corrected=True)
    assert corrected is not None and "staleness_correction" not in corrected  # already set


def test_the_momentum_correction_lowers_a_momentum_and_leaves_plain_sgd_alone():
    params = [torch.nn.Parameter(torch.zeros(2))]
    for configured, lowered in ((0.9, 0.4), (0.0, 0.0)):
        optimizer = torch.optim.SGD(params, lr=0.1, momentum=configured)
        correction = StalenessCorrection("momentum", dc_lambda=0.04, optimizer=optimizer)
        correction.prepare(optimizer, staleness=1)
        assert optimizer.param_groups[0]["momentum"] == pytest.approx(lowered)


def test_each_scheduler_defaults_to_the_correction_measured_best():
    expected = {"deft": "momentum", "asp": "predict", "ssp": "predict"}
    for scheduler, correction in expected.items():
        (cfg,) = compose_jobs([f"scheduler={scheduler}"], multirun=False, machine=False)
        assert cfg.scheduler.staleness_correction == correction
