"""Each compressor waits on the host only at the points it declares (``host_syncs``), and those
it must: a lone DEFT worker never waits on a GPU's route, a lone worker's union needs no sync,
and hard threshold's selection is one. Several workers: tests/dist/test_compressor_host_syncs.py."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_module
from torch.profiler import ProfilerActivity, profile

from gradsync.comm.host_sync import take_counts
from gradsync.compressors.code_paths import gpu_branches
from gradsync.compressors.deft import DEFTCompressor
from gradsync.compressors.threshold import ThresholdCompressor
from gradsync.compressors.topk import TopKCompressor
from gradsync.config.instantiate import build
from gradsync.jobs.compose import CONFIG_MODULE
from gradsync.jobs.discovery import group_options
from gradsync.types import GroupInfo, TensorPart

PARTS = (TensorPart(0, (8, 50)), TensorPart(1, (30,)), TensorPart(2, (300,)), TensorPart(3, (7,)))
STEPS = 3


def _passed(compressor, steps: int = STEPS) -> dict[str, int]:
    grad = torch.randn(sum(p.numel for p in PARTS), generator=torch.Generator().manual_seed(0))
    take_counts()
    for step in range(compressor.steady_step, compressor.steady_step + steps):
        group = GroupInfo("g", step, parts=PARTS, model_tensors=len(PARTS))
        payload, ctx = compressor.compress(grad.clone(), group=group)
        compressor.decompress(payload, ctx)
    return take_counts()


@pytest.mark.parametrize("name", group_options()["compressor"])
def test_every_compressor_passes_only_the_points_it_declares(name):
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose("train", overrides=[f"compressor={name}"])
    compressor = build(cfg.compressor, path="compressor")
    assert all(point and why for point, why in compressor.host_syncs.items())
    assert set(_passed(compressor)) <= set(compressor.host_syncs)


def test_one_deft_worker_never_waits_on_a_gpus_route():
    # Alone, a worker has no plan to agree on, and its k's are computed on the device; on a
    # CPU's own route it reads its norms, which are on the host already.
    for exact in (False, True):
        with gpu_branches():
            assert _passed(DEFTCompressor(density=0.05, exact_k=exact)) == {}
        assert _passed(DEFTCompressor(density=0.05, exact_k=exact)) == {"deft.norms": STEPS}


@pytest.mark.parametrize("exchange", ["union", "allgather"])
def test_one_workers_topk_never_waits(exchange):
    assert _passed(TopKCompressor(density=0.05, exchange=exchange)) == {}


def test_hard_threshold_waits_for_its_selection_alone():
    assert _passed(ThresholdCompressor(density=0.05)) == {"threshold.indices": STEPS}


def _topk_calls(compressor, sizes: list[int]) -> int:
    grad = torch.randn(sum(sizes), generator=torch.Generator().manual_seed(1))
    group = GroupInfo.of_sizes("g", 0, sizes)
    compressor.compress(grad, group=group)  # layouts built once
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        compressor.compress(grad, group=group)
    return sum(1 for event in prof.events() if event.name == "aten::topk")


@pytest.mark.parametrize(
    "make",
    [lambda: DEFTCompressor(density=0.01), lambda: TopKCompressor(density=0.01, scope="layer")],
    ids=["deft", "topk-layer"],
)
def test_layerwise_selection_is_a_handful_of_topk_calls_not_one_per_layer(make):
    sizes = [4000 + 4 * j for j in range(100)]  # 100 layers of one size class
    assert _topk_calls(make(), sizes) == 1
