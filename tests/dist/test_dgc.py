"""``compressor=dgc`` on two gloo workers: each sends the top-k of its own accumulated velocity
(clipped at clip_norm·2^(-1/2)), and the average of what both sent is what every worker gets;
checked against the paper's equations recomputed here from the workers' gradients."""

from __future__ import annotations

import math

import pytest
import torch

from gradsync.comm.collective import TorchCollective
from gradsync.compressors.dgc import DGCCompressor
from gradsync.types import GroupInfo
from tests.helpers.dist import run_world

pytestmark = pytest.mark.dist

SIZES = [300, 40, 500]
DENSITY, MOMENTUM, CLIP, STEPS = 0.02, 0.9, 5.0, 3


def _gradient(rank: int, step: int) -> torch.Tensor:
    return torch.randn(sum(SIZES), generator=torch.Generator().manual_seed(100 * step + rank))


def _run(rank: int, world_size: int, exchange: str) -> list[dict]:
    collective = TorchCollective()
    dgc = DGCCompressor(density=DENSITY, momentum=MOMENTUM, clip_norm=CLIP, exchange=exchange)
    dgc.bind(collective)
    records = []
    for step in range(STEPS):
        group = GroupInfo.of_sizes("g", step, SIZES)
        payload, ctx = dgc.compress(_gradient(rank, step), group=group)
        if dgc.allreducible:
            out = dgc.decompress(collective.all_reduce(payload), ctx)
        else:
            out = sum(dgc.decompress(p, ctx) for p in collective.all_gather(payload))
        records.append({"out": out / world_size, "selected": dgc.selected(payload, ctx)})
    return records


def _reference(rank: int, world_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(v sent, indices) of one worker per step, from the equations of §3.2 and §3.3."""
    numel = sum(SIZES)
    k = int(DENSITY * numel)
    u, v, sent = torch.zeros(numel), torch.zeros(numel), []
    for step in range(STEPS):
        g = _gradient(rank, step)
        g = g * min(1.0, CLIP / math.sqrt(world_size) / (float(g.norm()) + 1e-6))
        u = MOMENTUM * u + g
        v = v + u
        top = torch.topk(v.abs(), k).indices
        sent.append((v[top].clone(), top))
        u[top], v[top] = 0, 0
    return sent


def test_each_worker_sends_its_own_velocity_and_all_get_the_average(tmp_path):
    results = run_world(_run, 2, tmp_path, "allgather")
    references = [_reference(rank, 2) for rank in range(2)]
    for step in range(STEPS):
        expected = torch.zeros(sum(SIZES))
        for rank in range(2):
            values, top = references[rank][step]
            assert set(results[rank][step]["selected"].tolist()) == set(top.tolist())
            expected[top] += values / 2
        for rank in range(2):
            torch.testing.assert_close(results[rank][step]["out"], expected)
