"""The sparsifiers on one worker: selections against direct definitions, and error feedback.

Multi-worker behaviour (union, leader broadcast, DEFT's bins) is in tests/dist/test_sparsifiers.py.
"""

from __future__ import annotations

import time

import pytest
import torch

from gradsync.algorithms.deft_plan import assign_local_k, partition_layers
from gradsync.comm.solo import SoloCollective
from gradsync.compressors.cltk import CLTKCompressor
from gradsync.compressors.deft import DEFTCompressor
from gradsync.compressors.randomk import RandomKCompressor
from gradsync.compressors.selection import (
    range_norms,
    tensor_ranges,
    threshold_for_density,
    threshold_indices,
)
from gradsync.compressors.sparse import index_dtype
from gradsync.compressors.threshold import ThresholdCompressor
from gradsync.compressors.topk import TopKCompressor
from gradsync.feedback.residual import ResidualFeedback
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from gradsync.types import GroupInfo

SIZES = [300, 20, 500, 7, 173]  # a "model" of five tensors


def _grad(seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    # Different scales per tensor, as real layers have, so per-layer choices differ from global.
    scales = torch.cat([torch.full((n,), 10.0 ** (i % 3 - 1)) for i, n in enumerate(SIZES)])
    return torch.randn(sum(SIZES), generator=gen) * scales


def _selected(compressor, grad: torch.Tensor, step: int = 0) -> torch.Tensor:
    payload, ctx = compressor.compress(grad, group=GroupInfo.of_sizes("g", step, SIZES))
    return torch.sort(compressor.selected(payload, ctx)).values


def _largest(values: torch.Tensor, k: int) -> set[int]:
    order = torch.argsort(values.abs(), descending=True)
    return set(order[:k].tolist())


ALL = {
    "topk": lambda: TopKCompressor(density=0.05),
    "topk-allgather-layer": lambda: TopKCompressor(
        density=0.05, exchange="allgather", scope="layer"
    ),
    "threshold": lambda: ThresholdCompressor(density=0.05),
    "cltk": lambda: CLTKCompressor(density=0.05),
    "deft": lambda: DEFTCompressor(density=0.05),
    "deft-exact": lambda: DEFTCompressor(density=0.05, exact_k=True),
    "randomk": lambda: RandomKCompressor(density=0.05, seed=1),
}


def test_global_topk_selects_the_k_largest_magnitudes():
    grad = _grad()
    k = int(0.05 * grad.numel())
    for exchange in ("union", "allgather"):
        chosen = _selected(TopKCompressor(density=0.05, exchange=exchange), grad)
        assert set(chosen.tolist()) == _largest(grad, k)


def test_layer_scope_takes_k_l_in_every_tensor():
    grad = _grad()
    chosen = set(_selected(TopKCompressor(density=0.05, scope="layer"), grad).tolist())
    for start, end in tensor_ranges(SIZES):
        k_l = max(1, int(0.05 * (end - start)))
        expected = {start + i for i in _largest(grad[start:end], k_l)}
        assert {i for i in chosen if start <= i < end} == expected


def test_allgather_payload_is_values_and_narrow_indices():
    grad = _grad()
    payload, _ = TopKCompressor(density=0.05, exchange="allgather").compress(
        grad, group=GroupInfo("g", 0)
    )
    values, indices = payload
    assert indices.dtype == torch.int32  # 4 bytes per index on the wire, not 8
    torch.testing.assert_close(values, grad[indices.long()])
    assert index_dtype(2**31) == torch.int64


def test_threshold_selects_exactly_the_elements_at_or_above_it():
    grad = _grad()
    lam = float(grad.abs().median())
    chosen = set(_selected(ThresholdCompressor(density=0.05, threshold=lam), grad).tolist())
    assert chosen == set(torch.nonzero(grad.abs() >= lam).reshape(-1).tolist())
    assert threshold_indices(grad, 0.0).numel() == grad.numel()  # λ = 0: dense
    assert threshold_indices(grad, float(grad.abs().max()) * 2).numel() == 0


def test_threshold_heuristic_matches_the_published_value():
    # ResNet-18 on CIFAR-10 (11,173,962 parameters) at k_min = 0.1% gives λ = 4.73e-3.
    assert threshold_for_density(0.001, 11_173_962) == pytest.approx(4.73e-3, abs=5e-6)


def test_cltk_on_one_worker_is_plain_topk():
    grad = _grad()
    k = int(0.05 * grad.numel())
    assert set(_selected(CLTKCompressor(density=0.05), grad).tolist()) == _largest(grad, k)


@pytest.mark.parametrize("exact", [False, True])
def test_deft_on_one_worker_is_layerwise_topk_with_norm_proportional_k(exact):
    # docs/methods/compressors/deft.md, "What the tests check": with one worker DEFT is
    # layer-wise top-k with the norm-proportional k_j.
    grad = _grad()
    ranges = partition_layers(SIZES, 1)
    lengths = [e - s for s, e in ranges]
    ks = assign_local_k(range_norms(grad, ranges), lengths, int(0.05 * grad.numel()), exact=exact)
    expected = set()
    for (start, end), k in zip(ranges, ks, strict=True):
        expected |= {start + i for i in _largest(grad[start:end], k)}
    chosen = _selected(DEFTCompressor(density=0.05, exact_k=exact), grad)
    assert set(chosen.tolist()) == expected
    assert chosen.unique().numel() == chosen.numel()


@pytest.mark.parametrize("name", sorted(ALL))
def test_error_feedback_conserves_the_compensated_gradient(name):
    # residual + transmitted == compensated exactly, and the residual is zero where sent.
    compressor, feedback = ALL[name](), ResidualFeedback()
    for step in range(3):
        grad = _grad(step)
        compensated = feedback.compensate(grad, name="g")
        payload, ctx = compressor.compress(compensated, group=GroupInfo.of_sizes("g", step, SIZES))
        transmitted = compressor.decompress(payload, ctx)
        feedback.update(compensated, transmitted, name="g")
        residual = feedback.state_dict()["g"]
        assert torch.equal(residual + transmitted, compensated)
        sent = compressor.selected(payload, ctx)
        assert torch.count_nonzero(residual[sent]) == 0
        assert torch.equal(transmitted[sent], compensated[sent])


def test_threshold_heuristic_is_each_groups_own_whatever_the_order():
    """With several groups (one per tensor under scheduler=lags), each group's λ comes from
    its own size: the first group compressed must not set λ for the others."""
    compressor = ThresholdCompressor(density=0.01)
    small_first = [compressor.threshold_at(0.01, n) for n in (1_000, 1_000_000)]
    fresh = ThresholdCompressor(density=0.01)
    large_first = [fresh.threshold_at(0.01, n) for n in (1_000_000, 1_000)][::-1]
    assert (
        small_first
        == large_first
        == [
            threshold_for_density(0.01, 1_000),
            threshold_for_density(0.01, 1_000_000),
        ]
    )


def test_threshold_above_every_gradient_sends_nothing_and_memory_sums_the_gradients():
    compressor, feedback = ThresholdCompressor(density=0.05, threshold=1e9), ResidualFeedback()
    total = torch.zeros(sum(SIZES))
    for step in range(4):
        grad = _grad(step)
        total += grad
        compensated = feedback.compensate(grad, name="g")
        payload, ctx = compressor.compress(compensated, group=GroupInfo.of_sizes("g", step, SIZES))
        feedback.update(compensated, compressor.decompress(payload, ctx), name="g")
    torch.testing.assert_close(feedback.state_dict()["g"], total)


@pytest.mark.parametrize("name", sorted(ALL))
def test_one_worker_sync_applies_exactly_what_was_selected(name):
    # The whole sync template at n = 1 (no process group): plain SGD with lr = 1 moves the
    # weights by the transmitted gradient, and the logged density is what was selected.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(30, 10), torch.nn.Linear(10, 7))
    grads = [torch.randn_like(p) for p in model.parameters()]
    for p, g in zip(model.parameters(), grads, strict=True):
        p.grad = g.clone()
    before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    sync = AllreduceSync(
        compressor=ALL[name](),
        feedback=ResidualFeedback(),
        collective=SoloCollective(),
        clock=time.perf_counter,
    )
    sync.attach(model, torch.optim.SGD(model.parameters(), lr=1.0))
    stats = sync.step(step=0)
    after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    flat = torch.cat([g.reshape(-1) for g in grads])
    moved = before - after
    changed = moved != 0
    torch.testing.assert_close(moved[changed], flat[changed])
    assert stats.density_actual == pytest.approx(int(changed.sum()) / flat.numel())
    assert stats.error_norm == pytest.approx(float(flat[~changed].norm()), rel=1e-5)
