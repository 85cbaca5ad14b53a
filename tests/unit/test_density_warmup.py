"""DGC's density warm-up (``compressor.warmup_epochs``): the schedule, every sparsifier selecting
at it, and ``comm/density_setup`` reporting it."""

from __future__ import annotations

import time

import pytest
import torch

from gradsync.comm.solo import SoloCollective
from gradsync.compressors.cltk import CLTKCompressor
from gradsync.compressors.deft import DEFTCompressor
from gradsync.compressors.dgc import DGCCompressor
from gradsync.compressors.randomk import RandomKCompressor
from gradsync.compressors.sparse import density_k
from gradsync.compressors.threshold import ThresholdCompressor
from gradsync.compressors.topk import TopKCompressor
from gradsync.compressors.warmup import scheduled_density
from gradsync.feedback.residual import ResidualFeedback
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from gradsync.types import GroupInfo

SIZES = [3000, 40, 5000, 7, 1953]  # 10,000 elements
WARMUP = {"warmup_epochs": 4, "warmup_density": 0.25}
SPARSIFIERS = {
    "topk": lambda **w: TopKCompressor(density=0.001, **w),
    "topk-layer": lambda **w: TopKCompressor(density=0.001, scope="layer", **w),
    "cltk": lambda **w: CLTKCompressor(density=0.001, **w),
    "deft": lambda **w: DEFTCompressor(density=0.001, exact_k=True, **w),
    "randomk": lambda **w: RandomKCompressor(density=0.001, seed=3, **w),
    "dgc": lambda **w: DGCCompressor(density=0.001, **w),
    "dgc-group": lambda **w: DGCCompressor(density=0.001, selection="group", **w),
}
PER_TENSOR = {"topk-layer", "dgc"}  # k_l in every tensor; the others take k of the group


def _grad(seed: int = 0) -> torch.Tensor:
    return torch.randn(sum(SIZES), generator=torch.Generator().manual_seed(seed))


def _sent(compressor, grad: torch.Tensor, *, epoch: int, step: int = 0) -> torch.Tensor:
    group = GroupInfo.of_sizes("g", step, SIZES, epoch=epoch)
    payload, ctx = compressor.compress(grad.clone(), group=group)
    return compressor.selected(payload, ctx)


def test_the_schedule_is_dgcs_four_epoch_sequence():
    values = [
        scheduled_density(e, density=0.001, warmup_epochs=4, warmup_density=0.25) for e in range(6)
    ]
    # The paper's 75%, 93.75%, 98.4375%, 99.6%, 99.9% sparsity (its epochs 1-3 are 0.25·4^-e).
    paper = [0.25, 0.0625, 0.015625, 0.004, 0.001, 0.001]
    assert values == pytest.approx(paper, rel=0.02)
    # Exactly the exponential decay from 0.25 to 0.001, and density itself from epoch 4 on.
    assert values[1] == pytest.approx(0.25 * (0.004**0.25), rel=1e-12)
    assert values[4:] == [0.001, 0.001]


def test_no_warmup_is_the_density_and_the_schedule_never_goes_below_it():
    assert scheduled_density(0, density=0.01, warmup_epochs=0, warmup_density=0.25) == 0.01
    # A warm-up density under the target (refused by the schema) still never selects less.
    assert scheduled_density(1, density=0.3, warmup_epochs=2, warmup_density=0.25) == 0.3


@pytest.mark.parametrize("name", sorted(SPARSIFIERS))
def test_a_sparsifier_selects_the_scheduled_k(name):
    compressor = SPARSIFIERS[name](**WARMUP)
    n = sum(SIZES)
    for epoch, density in ((0, 0.25), (1, 0.25 * 0.004**0.25), (4, 0.001), (9, 0.001)):
        sent = _sent(compressor, _grad(epoch), epoch=epoch)
        if name in PER_TENSOR:
            expected = sum(density_k(density, s) for s in SIZES)
        else:
            expected = density_k(density, n)
        assert sent.numel() == expected, (epoch, density)


def test_threshold_derives_its_lambda_from_each_epochs_density():
    compressor = ThresholdCompressor(density=0.001, **WARMUP)
    grad = _grad() * 0.05
    # λ = 1/(2·sqrt(k)): 0.01 for k = 2,500 in epoch 0 (most pass), 0.16 for k = 10 after
    # warm-up (3σ: about 0.2% pass).
    early, late = (_sent(compressor, grad, epoch=e).numel() for e in (0, 4))
    assert early > 20 * late > 0


@pytest.mark.parametrize("name", sorted(SPARSIFIERS))
def test_warmup_off_is_bit_for_bit_todays_selection(name):
    plain, off = SPARSIFIERS[name](), SPARSIFIERS[name](warmup_epochs=0)
    for epoch in (0, 3):
        grad = _grad(epoch)
        a, b = _sent(plain, grad, epoch=epoch), _sent(off, grad, epoch=epoch)
        assert torch.equal(a, b)
        assert a.numel() == density_k(0.001, sum(SIZES)) or name in PER_TENSOR


def test_density_setup_reports_the_schedule_through_the_engine():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(100, 50), torch.nn.Linear(50, 10))
    sync = AllreduceSync(
        compressor=TopKCompressor(density=0.001, **WARMUP),
        feedback=ResidualFeedback(),
        collective=SoloCollective(),
        clock=time.perf_counter,
    )
    sync.attach(model, torch.optim.SGD(model.parameters(), lr=0.1))
    numel = sum(p.numel() for p in model.parameters())
    for step, epoch in enumerate((0, 1, 4)):
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        sync.begin(step=step, epoch=epoch)
        stats = sync.step(step=step, epoch=epoch)
        density = scheduled_density(epoch, density=0.001, **WARMUP)
        assert stats.density_setup == density
        assert stats.density_actual == pytest.approx(density_k(density, numel) / numel)
    sync.close()
