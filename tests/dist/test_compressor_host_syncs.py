"""Over real gloo ranks, every compressor waits on the host only at the points it declares
(``host_syncs``), and the sparsifiers whose agreement depends on the data pass theirs: union
top-k its union, hard threshold its selection and the lengths of its ragged gather, DEFT its
norms and its workers' counts once a step, and its plan at the steps another worker packed it."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_module

from gradsync.algorithms.deft_plan import decision_worker
from gradsync.comm.collective import TorchCollective
from gradsync.comm.host_sync import take_counts
from gradsync.config.instantiate import build
from gradsync.jobs.compose import CONFIG_MODULE
from gradsync.jobs.discovery import group_options
from gradsync.types import GroupInfo, TensorPart
from tests.helpers.dist import run_world

pytestmark = pytest.mark.dist

PARTS = (TensorPart(0, (8, 50)), TensorPart(1, (30,)), TensorPart(2, (300,)), TensorPart(3, (7,)))
STEPS = 3
MUST_PASS = {
    "topk": {"union.indices": STEPS},
    "threshold": {"threshold.indices": STEPS, "union.indices": STEPS, "all_gather.lengths": STEPS},
    "deft": {"deft.norms": STEPS, "all_gather.lengths": STEPS},  # and its plan: see below
}


def _passed(rank: int, world_size: int, configs: dict) -> dict[str, tuple[dict, list]]:
    collective = TorchCollective()
    numel = sum(p.numel for p in PARTS)
    results = {}
    for name, cfg in configs.items():
        compressor = build(cfg, path="compressor")
        compressor.bind(collective)
        take_counts()
        for step in range(compressor.steady_step, compressor.steady_step + STEPS):
            gen = torch.Generator().manual_seed(10 * step + rank)
            group = GroupInfo("g", step, parts=PARTS, model_tensors=len(PARTS))
            payload, _ = compressor.compress(torch.randn(numel, generator=gen), group=group)
            if compressor.allreducible:
                collective.all_reduce(payload)
            else:  # as the engine gathers it (a ragged payload exchanges its lengths)
                collective.all_gather(payload, same_shape=compressor.payload_same_shape)
        results[name] = (take_counts(), sorted(compressor.host_syncs))
    return results


def test_compressors_wait_only_where_they_declare_and_where_their_method_decides(tmp_path):
    configs = {}
    for name in group_options()["compressor"]:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            configs[name] = compose("train", overrides=[f"compressor={name}"]).compressor
    for rank, by_name in enumerate(run_world(_passed, 2, tmp_path, configs, timeout=300)):
        for name, (passed, declared) in by_name.items():
            assert set(passed) <= set(declared), name
            for point, count in MUST_PASS.get(name, {}).items():
                assert passed.get(point) == count, (name, point, passed)
        # DEFT's decision worker packed the bins it broadcasts: only the others read them.
        deciding = sum(decision_worker(step, 2) == rank for step in range(STEPS))
        assert by_name["deft"][0].get("deft.plan", 0) == STEPS - deciding
