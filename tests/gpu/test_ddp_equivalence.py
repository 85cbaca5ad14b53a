"""Dense gradsync training on NCCL equals PyTorch DDP: two ranks on two GPUs, the tiny float64
classifier, the same data, seed and steps, ``compressor=none`` and ``scheduler=allreduce`` (the
engine with its communication thread on its own CUDA stream) against DDP.

Tolerance: float64, rtol 0 and atol 1e-12, as the gloo comparison (tests/dist/
test_equivalence.py). The sums are taken differently: DDP averages bucket by bucket (its
gradients scaled by 1/N), gradsync all-reduces one flat tensor and divides by N, and NCCL
chooses its algorithm (ring, tree, NVLS) per message size, so with more ranks the order of the
additions differs. That costs float64 rounding, about 1e-16 relative per step, which six steps
cannot grow to 1e-12 (with two ranks every element is one addition, and halving is exact, so
the parameters should agree to the last bit). A wrong average (a missing 1/N, a gradient
applied twice, an update before the exchange landed) moves them by 1e-3 or more.
"""

from __future__ import annotations

import torch

from gradsync.comm.collective import TorchCollective
from gradsync.compressors.none import NoneCompressor
from gradsync.feedback.none import NoneFeedback
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from gradsync.train.timing import make_clock
from tests.helpers.dist import run_world
from tests.helpers.gpu import REPRODUCIBLE_CUBLAS, needs_gpus
from tests.helpers.training import tiny_model, train_ddp, train_synced

pytestmark = needs_gpus(2)

STEPS, WORKERS = 6, 2


def _both(rank: int, world_size: int) -> dict[str, list[torch.Tensor]]:
    device = torch.device("cuda", rank)
    sync = AllreduceSync(
        compressor=NoneCompressor(),
        feedback=NoneFeedback(),
        collective=TorchCollective(),
        clock=make_clock(device),
    )
    ours = train_synced(sync, rank, world_size, STEPS, device)
    return {"gradsync": ours, "ddp": train_ddp(rank, world_size, STEPS, device)}


def test_dense_allreduce_on_nccl_equals_ddp(tmp_path, monkeypatch):
    for key, value in REPRODUCIBLE_CUBLAS.items():
        monkeypatch.setenv(key, value)  # the spawned ranks inherit it
    ranks = run_world(_both, WORKERS, tmp_path, device="cuda")
    initial = [p.detach() for p in tiny_model().parameters()]
    moved = [not torch.equal(a, b) for a, b in zip(ranks[0]["ddp"], initial, strict=True)]
    assert any(moved), "training changed nothing"
    for rank in ranks:
        for ours, theirs in zip(rank["gradsync"], rank["ddp"], strict=True):
            torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
