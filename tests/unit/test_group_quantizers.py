"""The quantizers work on all tensors of a group at once (``gradsync/compressors/quantized.py``):
tensor by tensor their payloads are the per-tensor definition's (the codes bit for bit, the
scales to float rounding, since they are summed in another order), and the number of kernels a
step runs does not grow with the number of tensors."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from gradsync.compressors.bitpack import pack
from gradsync.compressors.qsgd import QSGDCompressor
from gradsync.compressors.seeding import seeded_generator
from gradsync.compressors.signsgd import SignSGDCompressor
from gradsync.compressors.ternary import TERNARY_BITS, clip_by_std, local_scaler, ternary_codes
from gradsync.compressors.terngrad import TernGradCompressor
from gradsync.types import GroupInfo

# Rows of 1024 whole, crossing and partial; tiny tensors; the classifier's two last.
SIZES = [3000, 1, 5, 2048, 700, 1500, 64, 10]
NUMEL = sum(SIZES)


def _gradient(seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    scales = torch.cat([torch.full((n,), 0.1 * (i + 1)) for i, n in enumerate(SIZES)])
    grad = torch.randn(NUMEL, generator=gen) * scales
    grad[[7, 3500, 5000]] *= 20  # outliers for clipping to cut
    return grad


def _compress(compressor, grad, step=0):
    group = GroupInfo.of_sizes("all", step, SIZES)
    payload, ctx = compressor.compress(grad.clone(), group=group)
    return payload, ctx, compressor.decompress(payload, ctx)


def _draws(numel: int, seed: int, step: int) -> list[torch.Tensor]:
    """The per-step draws the quantizers take, split per tensor (rank 0, group "all")."""
    gen = seeded_generator(seed, 0, step, "all", device=torch.device("cpu"))
    return list(torch.rand(numel, generator=gen).split(SIZES[: len(SIZES) - 2]))


@pytest.mark.parametrize("clip", [2.5, 0.0])
def test_terngrad_equals_its_per_tensor_definition(clip):
    grad = _gradient(1)
    payload, ctx, out = _compress(TernGradCompressor(clip=clip, seed=3), grad, step=5)
    parts = grad.split(SIZES)[:-2]
    clipped = [clip_by_std(part, clip) for part in parts]
    scalers = torch.stack([local_scaler(part) for part in clipped])
    torch.testing.assert_close(ctx.agreed_scales, scalers, rtol=1e-6, atol=0)
    draws = _draws(sum(SIZES[:-2]), seed=3, step=5)
    codes = [ternary_codes(part, s, u) for part, s, u in zip(clipped, scalers, draws, strict=True)]
    assert torch.equal(payload[0], pack(torch.cat(codes), TERNARY_BITS))
    decoded = [(c.float() - 1) * s for c, s in zip(codes, ctx.agreed_scales, strict=True)]
    assert torch.equal(out, torch.cat([*decoded, *grad.split(SIZES)[-2:]]))


def test_qsgd_codes_are_the_definitions_at_the_norms_it_sends():
    grad, levels = _gradient(2), 5
    payload, _, out = _compress(QSGDCompressor(levels=levels, seed=4), grad, step=2)
    packed, norms, _ = payload
    want = torch.stack([torch.linalg.vector_norm(p.double()) for p in grad.split(SIZES)])
    torch.testing.assert_close(norms.double(), want, rtol=1e-6, atol=0)
    gen = seeded_generator(4, 0, 2, "all", device=torch.device("cpu"))
    draws = torch.rand(NUMEL, generator=gen).split(SIZES)
    codes = []
    for part, norm, u in zip(grad.split(SIZES), norms, draws, strict=True):
        level = (u + part.abs() * (levels / norm)).floor().clamp(max=levels)
        codes.append(level.copysign(part).add(levels).to(torch.uint8))
    assert torch.equal(packed, pack(torch.cat(codes), 4))
    unit = norms * (1.0 / levels)
    decoded = [(c.float() - levels) * v for c, v in zip(codes, unit, strict=True)]
    assert torch.equal(out, torch.cat(decoded))


def test_signsgd_codes_are_the_signs_and_scales_the_mean_magnitudes():
    grad = _gradient(3)
    payload, _, out = _compress(SignSGDCompressor(), grad)
    packed, scales, _ = payload
    want = torch.stack([p.double().abs().mean() for p in grad.split(SIZES)])
    torch.testing.assert_close(scales.double(), want, rtol=1e-6, atol=0)
    assert torch.equal(packed, pack((grad >= 0).to(torch.uint8), 1))
    decoded = [torch.where(p >= 0, v, -v) for p, v in zip(grad.split(SIZES), scales, strict=True)]
    assert torch.equal(out, torch.cat(decoded))


def _kernels(compressor, sizes: list[int]) -> int:
    grad = torch.randn(sum(sizes), generator=torch.Generator().manual_seed(0))
    group = GroupInfo.of_sizes("all", 0, sizes)
    compressor.decompress(*compressor.compress(grad, group=group))  # layouts built once
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        compressor.decompress(*compressor.compress(grad, group=group))
    return sum(1 for event in prof.events() if event.name.startswith("aten::"))


@pytest.mark.parametrize(
    "make",
    [
        TernGradCompressor,
        lambda: TernGradCompressor(share_scalers=False, clip=0),
        QSGDCompressor,
        SignSGDCompressor,
    ],
    ids=["terngrad", "terngrad-noclip", "qsgd", "signsgd"],
)
def test_kernels_per_step_do_not_grow_with_the_number_of_tensors(make):
    few = [6000, 3000, 2000, 1000]
    many = [97, 103] * 60  # the same elements, 30 times the tensors
    assert _kernels(make(), few) == _kernels(make(), many)
