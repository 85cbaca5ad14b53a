"""The quantizers along a GPU's route, on this CPU (``gpu_branches``: the fused kernels compiled by
Inductor, the draws counter-based): each compiled kernel equals its eager definition (codes bit for
bit), the route's payloads are the per-tensor definitions' at its draws, and QSGD and TernGrad
stay unbiased with counter-based draws."""

from __future__ import annotations

import math

import pytest
import torch

from gradsync.compressors.bitpack import pack
from gradsync.compressors.code_paths import gpu_branches
from gradsync.compressors.counter_draws import counter_uniform, draw_key
from gradsync.compressors.qsgd import QSGDCompressor
from gradsync.compressors.quant_kernels import decode_packed
from gradsync.compressors.segments import segments
from gradsync.compressors.signsgd import SignSGDCompressor
from gradsync.compressors.ternary import clip_by_std, local_scaler, ternary_codes
from gradsync.compressors.terngrad import TernGradCompressor
from gradsync.types import GroupInfo

# Many small tensors and a few large ones, odd sizes, rows of 1024 whole, crossing and partial.
MIXED = (1, 3, 5000, 7, 2, 1025, 1, 64, 33, 2049, 9, 3, 4097, 5, 300)
ZERO = (4, 7, 12)
"""Positions in MIXED of all-zero tensors."""
SIZES = [3000, 1, 5, 2048, 700, 1500, 64, 10]  # the last two: TernGrad's float classifier
COMPRESSORS = {
    "qsgd": lambda: QSGDCompressor(levels=5, seed=4),
    "signsgd": SignSGDCompressor,
    "terngrad": lambda: TernGradCompressor(clip=2.5, seed=3),
}
ROUTES = {
    **COMPRESSORS,
    "terngrad-own": lambda: TernGradCompressor(clip=0, share_scalers=False, seed=3),
}
"""Payloads checked along the route: TernGrad also unclipped, its scalers in the payload."""
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
"""Statistics summed in another order: each row in the gradient's dtype eagerly, in float32 once
compiled."""


@pytest.fixture(autouse=True)
def _one_thread():
    """Compiled kernels on one thread: the cores are shared."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _gradient(sizes, seed: int = 0, zero: tuple[int, ...] = ()) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    parts = [torch.randn(n, generator=gen) * 0.1 * (i + 1) for i, n in enumerate(sizes)]
    for i in zero:
        parts[i].zero_()
    grad = torch.cat(parts)
    grad[[0, len(grad) // 3, len(grad) // 2]] *= 20  # outliers for clipping to cut
    return grad


def _draws(seed: int, step: int, numel: int) -> torch.Tensor:
    return counter_uniform(torch.arange(numel), draw_key(seed, 0, step, "all"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", list(COMPRESSORS))
def test_compiled_kernels_equal_their_eager_definitions(name, dtype):
    compressor = COMPRESSORS[name]()
    flat = _gradient(MIXED, seed=1, zero=ZERO).to(dtype)
    head = flat.numel()
    key = draw_key(0, 0, 3, "all") if compressor.stochastic else None
    with gpu_branches():
        tables = segments(MIXED, flat.device).tables
        parameters, scales = compressor.statistics(flat, head, tables)
    # Outside, the same kernels run their eager definitions.
    want_parameters, want_scales = compressor.statistics(flat, head, tables)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(scales, want_scales, rtol=tol, atol=0)
    for got, want in zip(parameters, want_parameters, strict=True):
        torch.testing.assert_close(got, want, rtol=tol, atol=0)
    encoder_args = (flat, head, tables, key, want_parameters, *compressor.encoder_args())
    with gpu_branches():
        packed = compressor.encoder(*encoder_args)
    assert torch.equal(packed, compressor.encoder(*encoder_args))
    assert packed.numel() == math.ceil(head * compressor.bits / 8)
    args = (compressor.bits, compressor.code_offset, compressor.code_unit)
    out, want = torch.empty_like(flat), torch.empty_like(flat)
    with gpu_branches():
        decode_packed(packed, want_scales, tables.ends, out, *args)
    decode_packed(packed, want_scales, tables.ends, want, *args)
    assert torch.equal(out, want)


@pytest.mark.parametrize("name", list(ROUTES))
def test_payloads_are_the_per_tensor_definitions_at_the_counter_draws(name):
    grad, step = _gradient(SIZES, seed=2), 5
    compressor = ROUTES[name]()
    with gpu_branches():
        payload, ctx = compressor.compress(
            grad.clone(), group=GroupInfo.of_sizes("all", step, SIZES)
        )
        out = compressor.decompress(payload, ctx)
    ternary = isinstance(compressor, TernGradCompressor)
    quantized = len(SIZES) - 2 if ternary else len(SIZES)
    parts = grad.split(SIZES)[:quantized]
    sent = ctx.agreed_scales if ctx.agreed_scales is not None else payload[1]
    if ternary:
        clipped = [clip_by_std(part, compressor.clip) for part in parts]
        want = torch.stack([local_scaler(part) for part in clipped])
        draws = _draws(3, step, sum(SIZES[:quantized])).split(SIZES[:quantized])
        codes = [ternary_codes(p, s, u) for p, s, u in zip(clipped, sent, draws, strict=True)]
        decoded = [(c.float() - 1) * s for c, s in zip(codes, sent, strict=True)]
    elif name == "qsgd":
        want = torch.stack([torch.linalg.vector_norm(p.double()) for p in parts])
        draws = _draws(4, step, grad.numel()).split(SIZES)
        codes = []
        for part, norm, u in zip(parts, sent, draws, strict=True):
            level = (u + part.abs() * (5 / norm)).floor().clamp(max=5)
            codes.append(level.copysign(part).add(5).to(torch.uint8))
        decoded = [(c.float() - 5) * (v * (1.0 / 5)) for c, v in zip(codes, sent, strict=True)]
    else:
        want = torch.stack([p.double().abs().mean() for p in parts])
        codes = [(p >= 0).to(torch.uint8) for p in parts]
        decoded = [torch.where(p >= 0, v, -v) for p, v in zip(parts, sent, strict=True)]
    torch.testing.assert_close(sent.double(), want.double(), rtol=1e-6, atol=0)
    assert torch.equal(payload[0], pack(torch.cat(codes), compressor.bits))
    assert torch.equal(out, torch.cat([*decoded, *grad.split(SIZES)[quantized:]]))


def test_draws_on_the_gpu_route_differ_per_step_and_repeat_with_the_seed():
    grad = _gradient(SIZES)

    def codes(seed: int, step: int) -> torch.Tensor:
        group = GroupInfo.of_sizes("all", step, SIZES)
        with gpu_branches():
            return TernGradCompressor(seed=seed).compress(grad, group=group)[0][0]

    assert torch.equal(codes(1, 3), codes(1, 3))
    assert not torch.equal(codes(1, 3), codes(1, 4))
    assert not torch.equal(codes(1, 3), codes(2, 3))


@pytest.mark.parametrize(
    "make", [lambda: TernGradCompressor(quantize_last=True), lambda: QSGDCompressor(levels=3)]
)
def test_quantizers_stay_unbiased_with_counter_draws(make):
    grad, repeats = _gradient(SIZES, seed=3), 2000
    compressor = make()
    total = torch.zeros(grad.numel(), dtype=torch.float64)
    with gpu_branches():
        for step in range(repeats):
            payload, ctx = compressor.compress(grad, group=GroupInfo.of_sizes("all", step, SIZES))
            total += compressor.decompress(payload, ctx).double()
    if isinstance(compressor, TernGradCompressor):
        target = torch.cat([clip_by_std(p, 2.5) for p in grad.split(SIZES)]).double()
        scales = ctx.agreed_scales.double()
        spread = scales.repeat_interleave(torch.tensor(SIZES)) * target.abs()  # >= Var(value)
    else:
        target = grad.double()
        unit = payload[1].double() / 3
        spread = (unit.repeat_interleave(torch.tensor(SIZES)) / 2) ** 2  # >= Var(value)
    # Each element's mean within 5 standard errors.
    bound = 5 * torch.sqrt(spread / repeats) + 1e-6
    error = (total / repeats - target).abs()
    assert torch.all(error <= bound), float((error / bound).max())
