"""Compressor state travels with the scheduler's state through a real checkpoint on disk, and a
checkpoint written before compressors kept state still resumes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from torch import nn

from gradsync.comm.solo import SoloCollective
from gradsync.compressors.randomk import RandomKCompressor
from gradsync.compressors.terngrad import TernGradCompressor
from gradsync.feedback.residual import ResidualFeedback
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from gradsync.train import checkpoint
from gradsync.types import Compressor


def _trained(compressor: Compressor) -> AllreduceSync:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    sync = AllreduceSync(
        compressor=compressor,
        feedback=ResidualFeedback(),
        collective=SoloCollective(),
        clock=time.perf_counter,
    )
    sync.attach(model, torch.optim.SGD(model.parameters(), lr=0.1))
    sync.begin(step=0)
    nn.functional.cross_entropy(model(torch.randn(16, 6)), torch.randint(0, 3, (16,))).backward()
    sync.step(step=0)
    return sync


def _save_and_load(tmp_path: Path, sync: AllreduceSync) -> dict:
    checkpoint.save(
        tmp_path,
        rank=0,
        world_size=1,
        position=checkpoint.Position(epoch=0, batch_in_epoch=1, step=1),
        common={},
        local={"sync": sync.state_dict()},
        barrier=lambda: None,
    )
    _, local, _ = checkpoint.load(checkpoint.resolve_checkpoint(tmp_path), rank=0)
    return local["sync"]


@pytest.mark.parametrize(
    "make", [TernGradCompressor, lambda: RandomKCompressor(density=0.2)], ids=["terngrad", "rk"]
)
def test_compressor_state_is_saved_and_restored_with_the_scheduler(tmp_path, make):
    saved = _save_and_load(tmp_path, _trained(make()))
    assert saved["compressor"] == make().state_dict() == {}
    resumed = _trained(make())
    resumed.load_state_dict(saved)
    assert resumed.compressor.state_dict() == {}


def test_a_checkpoint_from_before_compressor_state_resumes(tmp_path):
    sync = _trained(RandomKCompressor(density=0.2))
    saved = _save_and_load(tmp_path, sync)
    del saved["compressor"]  # as written before compressors had state
    resumed = _trained(RandomKCompressor(density=0.2, seed=5))
    resumed.load_state_dict(saved)
    torch.testing.assert_close(resumed.feedback.state_dict(), sync.feedback.state_dict())


def test_state_saved_for_another_compressor_is_refused(tmp_path):
    saved = _save_and_load(tmp_path, _trained(TernGradCompressor()))
    saved["compressor"] = {"q": torch.zeros(3)}  # e.g. a low-rank method's factors
    with pytest.raises(ValueError, match="TernGradCompressor keeps no state"):
        _trained(TernGradCompressor()).load_state_dict(saved)
