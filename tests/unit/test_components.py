"""Compressors and error feedback: invariants that need no process group."""

from __future__ import annotations

import time

import pytest
import torch

from gradsync.comm.solo import SoloCollective
from gradsync.compressors.cltk import CLTKCompressor
from gradsync.compressors.deft import DEFTCompressor
from gradsync.compressors.none import NoneCompressor
from gradsync.compressors.randomk import RandomKCompressor
from gradsync.compressors.topk import TopKCompressor
from gradsync.feedback.none import NoneFeedback
from gradsync.feedback.residual import ResidualFeedback
from gradsync.schedulers.engine.components import SyncComponents
from gradsync.schedulers.engine.exchange import Bucket
from gradsync.types import GroupInfo


def test_none_is_exact_and_dense():
    grad = torch.randn(37)
    c = NoneCompressor()
    payload, ctx = c.compress(grad, group=GroupInfo("w", 3))
    assert torch.equal(c.decompress(payload, ctx), grad)
    assert c.selected(payload, ctx) is None and c.density == 1.0


@pytest.mark.parametrize("density", [1e-3, 0.01, 0.3, 1.0])
def test_randomk_keeps_exactly_k_distinct_elements(density):
    grad = torch.randn(5000)
    c = RandomKCompressor(density=density, seed=1)
    payload, ctx = c.compress(grad, group=GroupInfo("w", 0))
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
    pick = lambda c, **kw: c.selected(*c.compress(grad, group=GroupInfo(**kw)))  # noqa: E731
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
    transmitted = c.decompress(*c.compress(compensated, group=GroupInfo("w", 0)))
    fb.update(compensated, transmitted, name="w")
    residual = fb.state_dict()["w"]
    torch.testing.assert_close(compensated, transmitted + residual)  # nothing is lost
    assert fb.norm() == pytest.approx(float(residual.norm()), rel=1e-6)
    nxt = torch.randn(200)
    torch.testing.assert_close(fb.compensate(nxt, name="w"), nxt + residual)
    restored = ResidualFeedback()
    restored.load_state_dict(fb.state_dict())
    torch.testing.assert_close(restored.compensate(nxt, name="w"), nxt + residual)


def test_the_error_norm_of_many_large_residuals_matches_a_float64_reference():
    fb = ResidualFeedback()
    generator = torch.Generator().manual_seed(3)
    residuals = {f"g{i}": torch.randn(n, generator=generator) * (i + 1) for i, n in
                 enumerate([3_000_000, 17, 250_000, 1])}  # fmt: skip
    for name, residual in residuals.items():
        fb.update(residual, torch.zeros_like(residual), name=name)
    reference = torch.cat([r.double() for r in residuals.values()]).norm().item()
    assert fb.norm() == pytest.approx(reference, rel=1e-7)


def test_none_feedback_forgets():
    fb = NoneFeedback()
    grad = torch.randn(10)
    fb.update(grad, torch.zeros(10), name="w")
    assert torch.equal(fb.compensate(grad, name="w"), grad) and fb.norm() == 0.0


def test_random_subset_is_distinct_and_uniform():
    from gradsync.compressors.counter_draws import draw_key
    from gradsync.compressors.randomk import random_subset

    cpu = torch.device("cpu")
    counts = torch.zeros(20)
    for trial in range(4000):
        pick = random_subset(20, 5, draw_key(0, trial), cpu)
        assert pick.numel() == 5 and pick.unique().numel() == 5
        counts[pick] += 1
    # each index is in a uniform 5-of-20 subset with probability 1/4 (std 0.007 over 4000 draws)
    assert torch.all((counts / 4000 - 0.25).abs() < 0.04)
    big = random_subset(10**7, 1000, draw_key(1), cpu)
    assert big.unique().numel() == 1000 and int(big.min()) >= 0 and int(big.max()) < 10**7


@pytest.mark.parametrize(
    "make",
    [
        lambda: TopKCompressor(density=0.05),
        lambda: TopKCompressor(density=0.05, exchange="allgather"),
        lambda: DEFTCompressor(density=0.05),
        lambda: CLTKCompressor(density=0.05),
    ],
)
@pytest.mark.parametrize("scratch", [False, True])
def test_a_sparsifier_keeps_the_residual_without_a_dense_copy(make, scratch):
    """The residual of a sparsifier that sends its own values (``forget_sent``) is what
    compensated - decompressed gives, step after step, also when the gradient is the caller's
    scratch (compensated in place); a gradient that is not, and an fp16 snapshot of the
    residuals, are never written into."""
    compressor = make()
    components = SyncComponents(
        compressor=compressor,
        feedback=ResidualFeedback(),
        collective=SoloCollective(),
        clock=time.perf_counter,
    )
    residual = torch.zeros(300)
    for step in range(3):
        grad = torch.randn(300)
        kept = grad.clone()
        snapshot = components.feedback.snapshot()
        before = {name: r.clone() for name, r in snapshot.items()}
        group = GroupInfo.of_sizes("w", step, [100, 200])
        payload, ctx = components.compress_with_feedback(grad, group=group, scratch=scratch)
        compensated = kept + residual
        residual = compensated - compressor.decompress(payload, ctx)
        torch.testing.assert_close(components.feedback.state_dict()["w"], residual)
        assert scratch or torch.equal(grad, kept)
        assert all(torch.equal(snapshot[name], r) for name, r in before.items())


def test_exchange_hands_the_compressed_bucket_to_the_family_and_returns_its_future():
    """The engine's contract (``engine/exchange.py``): the family's ``send`` gets the payload
    and context compress_with_feedback makes of the bucket (top-k of the compensated gradient,
    the rest kept as the residual), and the future gives what ``send``'s function returns;
    ``combined`` turns a received payload into the bucket's sum."""
    components = SyncComponents(
        compressor=TopKCompressor(density=0.1, exchange="allgather"),
        feedback=ResidualFeedback(),
        collective=SoloCollective(),
        clock=time.perf_counter,
    )
    grad = torch.randn(50)
    bucket = Bucket(3, grad.clone(), GroupInfo("part3", 0))
    handed: list[tuple[Bucket, tuple[torch.Tensor, ...]]] = []

    def send(got, payload, ctx):
        handed.append((got, payload))
        return lambda: [payload]  # one worker's all-gather

    exchanged = components.exchange(bucket, send)
    assert handed == [(bucket, exchanged.payload)]
    summed, selected = components.combined(exchanged, exchanged.wait())
    top = grad.abs().topk(5).indices
    assert torch.equal(summed[top], grad[top]) and int(selected) == 5
    assert torch.count_nonzero(summed) == 5
    residual = components.feedback.state_dict()["part3"]
    torch.testing.assert_close(residual + summed, grad)
