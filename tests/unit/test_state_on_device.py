"""Error-feedback state stays where the model lives. On the ``meta`` device, where any tensor
that went through the host fails to mix with the rest (and a copy to the host fails outright),
a re-plan cuts residuals anew on the device, a checkpoint's state lands on the model's device,
and the memory's norm is taken wherever its tensors are."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from torch import nn

from gradsync.comm.collective import TorchCollective
from gradsync.compressors.topk import TopKCompressor
from gradsync.feedback.residual import ResidualFeedback, memory_norm
from gradsync.schedulers.engine.buckets import Buckets
from gradsync.schedulers.engine.residuals import rebucket_residuals
from gradsync.schedulers.pipelined.lags import LagsSync

META = torch.device("meta")


@pytest.fixture
def one_rank() -> Iterator[None]:
    """A real one-rank gloo group in this process (the scheduler's collective needs one)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _feedback(residuals: dict[str, torch.Tensor]) -> ResidualFeedback:
    feedback = ResidualFeedback()
    feedback.load_state_dict(residuals)
    return feedback


def _residuals(feedback: ResidualFeedback) -> dict[str, torch.Tensor]:
    """The memory as it is, without a copy (``snapshot`` holds the tensors themselves)."""
    held = feedback.snapshot()
    assert isinstance(held, dict)
    return held


def test_rebucketing_keeps_residuals_on_the_device():
    old, new = Buckets((0, 3, 8)), Buckets((0, 6, 8))
    feedback = _feedback({"bucket0": torch.ones(3, device=META)})  # bucket 1 has none yet
    like = torch.empty(1, device=META)
    rebucket_residuals(feedback, old, new, like=like)
    residuals = _residuals(feedback)
    assert sorted(residuals) == ["bucket0", "bucket1"]
    assert [r.device for r in residuals.values()] == [META, META]
    assert [r.numel() for r in residuals.values()] == [6, 2]


def test_rebucketing_moves_residuals_in_their_elements():
    old, new = Buckets((0, 3, 8)), Buckets((0, 2, 8))
    feedback = _feedback({"bucket0": torch.tensor([1.0, 2, 3]), "bucket1": torch.arange(5.0)})
    rebucket_residuals(feedback, old, new, like=torch.empty(1))
    got = _residuals(feedback)
    assert got["bucket0"].tolist() == [1, 2]
    assert got["bucket1"].tolist() == [3, 0, 1, 2, 3, 4]


def _meta_lags() -> tuple[LagsSync, ResidualFeedback, nn.Module]:
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2)).to(META)
    feedback = ResidualFeedback()
    sync = LagsSync(
        compressor=TopKCompressor(density=0.5),
        feedback=feedback,
        collective=TorchCollective(),
        clock=time.perf_counter,
    )
    sync.attach(model, torch.optim.SGD(model.parameters(), lr=0.1))
    return sync, feedback, model


def test_a_new_plan_regroups_residuals_on_the_device(one_rank):
    sync, feedback, model = _meta_lags()
    sizes = sync.sizes()
    feedback.load_state_dict(
        {sync.group_name(g): torch.zeros(n, device=META) for g, n in enumerate(sizes)}
    )
    sync.use_plan((len(sizes),))  # every tensor in one group
    residuals = _residuals(feedback)
    assert list(residuals) == [sync.group_name(0)]
    assert residuals[sync.group_name(0)].device == META
    assert residuals[sync.group_name(0)].numel() == sum(p.numel() for p in model.parameters())


def test_restored_residuals_land_where_the_model_lives(one_rank):
    sync, feedback, _ = _meta_lags()
    saved = {"feedback": {sync.group_name(0): torch.ones(6)}, "compressor": {}}  # host
    sync.load_components_state(saved)
    assert [r.device for r in _residuals(feedback).values()] == [META]


def test_memory_norm_takes_tensors_wherever_they_are():
    on_device, on_host = torch.ones(3, device=META), torch.full((4,), 2.0)
    assert memory_norm([on_device, on_host]).device == META
    assert memory_norm([on_host, torch.ones(5)]).item() == pytest.approx((16 + 5) ** 0.5)
    assert memory_norm([]).item() == 0
