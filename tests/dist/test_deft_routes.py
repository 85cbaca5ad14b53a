"""DEFT over real gloo ranks along both routes: a GPU's (the batched ``SegmentedTopK`` in every
worker's own layers, run here on the CPU) agrees with a CPU's own (``LayerwiseTopK``) on every
index set, step after step, and every worker agrees on it (docs/methods/compressors/deft.md)."""

from __future__ import annotations

import itertools

import pytest
import torch

from gradsync.comm.collective import TorchCollective
from gradsync.compressors.code_paths import gpu_branches
from gradsync.compressors.deft import DEFTCompressor
from gradsync.types import GroupInfo
from tests.helpers.dist import run_world

pytestmark = pytest.mark.dist

SIZES = [400, 30, 900, 11, 250, 5]
STEPS = 3


def _selections(rank: int, world_size: int) -> dict[tuple[str, bool], list[list[int]]]:
    collective = TorchCollective()
    by_route = {}
    for route, exact in itertools.product(("cpu", "gpu"), (False, True)):
        compressor = DEFTCompressor(density=0.02, exact_k=exact)
        compressor.bind(collective)
        chosen = []
        for step in range(STEPS):
            gen = torch.Generator().manual_seed(100 * step + rank)
            grad = torch.randn(sum(SIZES), generator=gen)
            group = GroupInfo.of_sizes("g", step, SIZES)
            if route == "gpu":
                with gpu_branches():
                    payload, ctx = compressor.compress(grad, group=group)
            else:
                payload, ctx = compressor.compress(grad, group=group)
            chosen.append(sorted(compressor.selected(payload, ctx).tolist()))
        by_route[route, exact] = chosen
    return by_route


def test_both_routes_agree_on_every_workers_index_set(tmp_path):
    results = run_world(_selections, 2, tmp_path, timeout=300)
    for by_route in results:
        for exact in (False, True):
            cpu, gpu = by_route["cpu", exact], by_route["gpu", exact]
            assert gpu == cpu == results[0]["cpu", exact]
            assert all(len(set(chosen)) == len(chosen) for chosen in gpu)
