"""Quantizers over a real gloo process group: TernGrad's scalers are identical on every worker
(the maximum of the local ones), and the all-gathered average equals the mean of what each
worker sent, with the bytes counted from the packed payloads."""

from __future__ import annotations

import math

import pytest
import torch

from gradsync.comm.collective import TorchCollective
from gradsync.compressors.bf16 import BF16Compressor
from gradsync.compressors.fp16 import FP16Compressor
from gradsync.compressors.qsgd import QSGDCompressor
from gradsync.compressors.signsgd import SignSGDCompressor
from gradsync.compressors.ternary import clip_by_std
from gradsync.compressors.terngrad import TernGradCompressor
from gradsync.types import GroupInfo
from tests.helpers.dist import run_world

pytestmark = pytest.mark.dist

SIZES = [200, 13, 501, 6, 40, 4]
WORKERS = 3
FACTORIES = {
    "terngrad": TernGradCompressor,
    "terngrad-own-scalers": lambda: TernGradCompressor(share_scalers=False),
    "qsgd": lambda: QSGDCompressor(levels=5),
    "signsgd": SignSGDCompressor,
    "fp16": FP16Compressor,
    "bf16": BF16Compressor,
}


def _gradient(rank: int, step: int) -> torch.Tensor:
    # Ranks differ in scale, so their local scalers differ.
    gen = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(sum(SIZES), generator=gen) * (1 + rank)


def _exchange(rank: int, world_size: int, steps: int) -> dict[str, list[dict]]:
    collective = TorchCollective()
    results: dict[str, list[dict]] = {}
    for name, factory in FACTORIES.items():
        compressor = factory()
        compressor.bind(collective)
        records = []
        for step in range(steps):
            grad = _gradient(rank, step)
            payload, ctx = compressor.compress(grad, group=GroupInfo.of_sizes("all", step, SIZES))
            sent = compressor.decompress(payload, ctx)
            if compressor.allreducible:
                total = compressor.decompress(collective.all_reduce(payload), ctx)
            else:
                gathered = collective.all_gather(payload)
                total = sum(compressor.decompress(p, ctx) for p in gathered)
            records.append(
                {
                    "grad": grad,
                    "sent": sent,
                    "mean": total / world_size,
                    "scales": getattr(ctx, "agreed_scales", None),
                    "bytes": collective.take_bytes().payload,
                }
            )
        results[name] = records
    return results


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return run_world(_exchange, WORKERS, tmp_path_factory.mktemp("quantizers"), 2)


def test_terngrad_scalers_are_identical_and_the_largest_local_one(world):
    for step in range(2):
        records = [r["terngrad"][step] for r in world]
        for r in records[1:]:
            assert torch.equal(r["scales"], records[0]["scales"])
        local = torch.stack(
            [
                torch.stack([clip_by_std(p, 2.5).abs().max() for p in r["grad"].split(SIZES)[:-2]])
                for r in records
            ]
        )
        torch.testing.assert_close(records[0]["scales"], local.max(dim=0).values)


def test_terngrad_values_on_every_worker_use_the_shared_scaler(world):
    for r in world:
        record = r["terngrad"][0]
        for sent, s in zip(record["sent"].split(SIZES)[:-2], record["scales"], strict=True):
            assert set(sent.unique().tolist()) <= {-float(s), 0.0, float(s)}


@pytest.mark.parametrize("name", list(FACTORIES))
def test_every_worker_gets_the_mean_of_what_the_workers_sent(world, name):
    for step in range(2):
        records = [r[name][step] for r in world]
        expected = sum(r["sent"] for r in records) / WORKERS
        for r in records:
            # fp16/bf16 sum on the wire in their own precision.
            tol = {"fp16": 2e-3, "bf16": 2e-2}.get(name, 1e-6)
            torch.testing.assert_close(r["mean"], expected, atol=tol * 3, rtol=tol)


def test_terngrad_bytes_are_the_packed_codes_the_classifier_and_the_scalers(world):
    quantized = len(SIZES) - 2
    codes = math.ceil(sum(SIZES[:-2]) / 4)
    classifier = 4 * (SIZES[-2] + SIZES[-1])
    lengths = 8  # each all-gathered tensor's length, so ragged payloads can be trimmed
    shared = world[0]["terngrad"][0]["bytes"]
    assert shared == codes + classifier + 4 * quantized + 2 * lengths
    own = world[0]["terngrad-own-scalers"][0]["bytes"]
    assert own == codes + classifier + 4 * quantized + 3 * lengths
    dense = 4 * sum(SIZES)
    assert world[0]["bf16"][0]["bytes"] == world[0]["fp16"][0]["bytes"] == dense // 2
