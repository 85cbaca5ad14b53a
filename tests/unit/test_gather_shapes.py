"""Which all-gathers skip the exchange of lengths: each compressor says whether every worker's
payload has the same shapes, the union exchange whether every worker selected as many indices,
and the engine passes the compressor's word on to the collective."""

from __future__ import annotations

import time

import pytest
import torch

from gradsync.comm.solo import SoloCollective
from gradsync.compressors.bf16 import BF16Compressor
from gradsync.compressors.cltk import CLTKCompressor
from gradsync.compressors.deft import DEFTCompressor
from gradsync.compressors.fp16 import FP16Compressor
from gradsync.compressors.none import NoneCompressor
from gradsync.compressors.qsgd import QSGDCompressor
from gradsync.compressors.randomk import RandomKCompressor
from gradsync.compressors.signsgd import SignSGDCompressor
from gradsync.compressors.terngrad import TernGradCompressor
from gradsync.compressors.threshold import ThresholdCompressor
from gradsync.compressors.topk import TopKCompressor
from gradsync.feedback.none import NoneFeedback
from gradsync.feedback.residual import ResidualFeedback
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from gradsync.types import GroupInfo

SIZES = [40, 7, 25, 3]

SAME_SHAPE = {  # compressor: whether every worker's payload has this worker's shapes
    "none": (NoneCompressor, True),
    "fp16": (FP16Compressor, True),
    "bf16": (BF16Compressor, True),
    "terngrad": (TernGradCompressor, True),
    "terngrad-float-epochs": (lambda: TernGradCompressor(float_every_epochs=2), True),
    "qsgd": (QSGDCompressor, True),
    "signsgd": (SignSGDCompressor, True),
    "randomk": (lambda: RandomKCompressor(density=0.1), True),
    "cltk": (lambda: CLTKCompressor(density=0.1), True),
    "deft": (lambda: DEFTCompressor(density=0.1), True),  # values at the agreed union
    "topk-union": (lambda: TopKCompressor(density=0.1), True),
    "topk-allgather": (lambda: TopKCompressor(density=0.1, exchange="allgather"), True),
    "topk-allgather-layer": (
        lambda: TopKCompressor(density=0.1, exchange="allgather", scope="layer"),
        True,
    ),
    "threshold-union": (lambda: ThresholdCompressor(density=0.1), True),
    "threshold-allgather": (
        lambda: ThresholdCompressor(density=0.1, exchange="allgather"),
        False,
    ),
}


class _Gathers(SoloCollective):
    """A world that remembers what each all-gather was told about its shapes; of one worker,
    or seen as larger by a compressor that exchanges only with other workers (each collective
    still answers as the world of one)."""

    def __init__(self, world_size: int = 1) -> None:
        self.world_size = world_size
        self.same_shape: list[bool] = []

    def all_gather(self, payload, *, same_shape=False):
        self.same_shape.append(same_shape)
        return [payload]


@pytest.mark.parametrize("name", sorted(SAME_SHAPE))
def test_each_compressor_says_whether_payloads_have_the_same_shapes_everywhere(name):
    make, same = SAME_SHAPE[name]
    assert make().payload_same_shape is same


@pytest.mark.parametrize(
    ("make", "same_count", "world_size"),
    [
        (lambda: TopKCompressor(density=0.1), True, 1),
        (lambda: TopKCompressor(density=0.1, scope="layer"), True, 1),
        (lambda: ThresholdCompressor(density=0.1, threshold=0.5), False, 1),
        # Each worker's own layers and k (alone, DEFT gathers nothing)
        (lambda: DEFTCompressor(density=0.1), False, 2),
    ],
)
def test_indices_gathered_while_selecting_skip_the_lengths_only_when_every_worker_has_k(
    make, same_count, world_size
):
    compressor, collective = make(), _Gathers(world_size)
    compressor.bind(collective)
    compressor.compress(torch.randn(sum(SIZES)), group=GroupInfo.of_sizes("g", 0, SIZES))
    assert collective.same_shape == [same_count]


@pytest.mark.parametrize(
    "name", ["terngrad", "qsgd", "signsgd", "topk-allgather", "threshold-allgather"]
)
def test_the_engine_gathers_a_payload_as_its_compressor_declares(name):
    make, same = SAME_SHAPE[name]
    compressor, collective = make(), _Gathers()
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Linear(4, 3))
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    sync = AllreduceSync(
        compressor=compressor,
        feedback=ResidualFeedback() if compressor.error_feedback else NoneFeedback(),
        collective=collective,
        clock=time.perf_counter,
    )
    sync.attach(model, torch.optim.SGD(model.parameters(), lr=0.1))
    sync.step(step=0)
    assert collective.same_shape == [same]
