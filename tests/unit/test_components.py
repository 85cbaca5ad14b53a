"""Compressors and error feedback: invariants that need no process group."""

from __future__ import annotations

import pytest
import torch

from gradsync.compressors.none import NoneCompressor
from gradsync.compressors.randomk import RandomKCompressor
from gradsync.feedback.none import NoneFeedback
from gradsync.feedback.residual import ResidualFeedback


def test_none_is_exact_and_dense():
    grad = torch.randn(37)
    c = NoneCompressor()
    payload, ctx = c.compress(grad, name="w", step=3)
    assert torch.equal(c.decompress(payload, ctx), grad)
    assert c.selected(payload, ctx) is None and c.density == 1.0


@pytest.mark.parametrize("density", [1e-3, 0.01, 0.3, 1.0])
def test_randomk_keeps_exactly_k_distinct_elements(density):
    grad = torch.randn(5000)
    c = RandomKCompressor(density=density, seed=1)
    payload, ctx = c.compress(grad, name="w", step=0)
    idx = c.selected(payload, ctx)
    k = max(1, int(density * grad.numel()))
    assert idx.numel() == k == idx.unique().numel() == payload[0].numel()
    out = c.decompress(payload, ctx)
    assert torch.equal(out[idx], grad[idx])
    mask = torch.ones_like(grad, dtype=torch.bool)
    mask[idx] = False
    assert torch.count_nonzero(out[mask]) == 0


def test_randomk_indices_depend_on_seed_step_and_name_only():
    grad = torch.randn(1000)
    pick = lambda c, **kw: c.selected(*c.compress(grad, **kw))  # noqa: E731
    a, b = RandomKCompressor(density=0.05, seed=7), RandomKCompressor(density=0.05, seed=7)
    assert torch.equal(pick(a, name="w", step=4), pick(b, name="w", step=4))
    assert not torch.equal(pick(a, name="w", step=4), pick(a, name="w", step=5))
    assert not torch.equal(pick(a, name="w", step=4), pick(a, name="b", step=4))
    assert not torch.equal(
        pick(a, name="w", step=4), pick(RandomKCompressor(density=0.05, seed=8), name="w", step=4)
    )


def test_residual_feedback_invariant_and_state():
    fb = ResidualFeedback()
    c = RandomKCompressor(density=0.1, seed=0)
    grad = torch.randn(200)
    compensated = fb.compensate(grad, name="w")
    assert torch.equal(compensated, grad)  # nothing remembered yet
    transmitted = c.decompress(*c.compress(compensated, name="w", step=0))
    fb.update(compensated, transmitted, name="w")
    residual = fb.state_dict()["w"]
    torch.testing.assert_close(compensated, transmitted + residual)  # nothing is lost
    assert fb.norm() == pytest.approx(float(residual.norm()), rel=1e-6)
    nxt = torch.randn(200)
    torch.testing.assert_close(fb.compensate(nxt, name="w"), nxt + residual)
    restored = ResidualFeedback()
    restored.load_state_dict(fb.state_dict())
    torch.testing.assert_close(restored.compensate(nxt, name="w"), nxt + residual)


def test_none_feedback_forgets():
    fb = NoneFeedback()
    grad = torch.randn(10)
    fb.update(grad, torch.zeros(10), name="w")
    assert torch.equal(fb.compensate(grad, name="w"), grad) and fb.norm() == 0.0
