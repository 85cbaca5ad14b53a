"""TernGrad's quantizer and the bit packing under it (docs/methods/compressors/terngrad.md,
"What the tests check")."""

from __future__ import annotations

import math

import pytest
import torch

from gradsync.compressors.bitpack import pack, packed_size, unpack
from gradsync.compressors.ternary import (
    TERNARY_BITS,
    clip_by_std,
    local_scaler,
    ternarize,
    ternary_codes,
)


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("numel", [0, 1, 3, 4, 5, 7, 8, 9, 33])
def test_pack_round_trips_any_length(bits, numel):
    gen = torch.Generator().manual_seed(numel)
    codes = torch.randint(0, 2**bits, (numel,), generator=gen, dtype=torch.uint8)
    packed = pack(codes, bits)
    assert packed.dtype == torch.uint8 and packed.numel() == packed_size(numel, bits)
    assert packed.numel() == math.ceil(numel * bits / 8)
    assert torch.equal(unpack(packed, bits, numel), codes)


def test_ternary_codes_round_trip_at_two_bits():
    grad = torch.tensor([-3.0, 0.0, 2.0, 5.0, -1.0, 0.0, 0.0])
    draws = torch.zeros(7)  # u = 0 keeps every nonzero element
    codes = ternary_codes(grad, 5.0, draws)
    assert codes.tolist() == [0, 1, 2, 2, 0, 1, 1]
    packed = pack(codes, TERNARY_BITS)
    assert packed.numel() == 2  # 7 codes, 4 per byte
    assert torch.equal(unpack(packed, TERNARY_BITS, 7), codes)


def _draws(grad: torch.Tensor, scaler: float, repeats: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    return ternarize(grad.expand(repeats, -1).contiguous(), scaler, gen).double()


def test_ternarization_is_unbiased_with_the_right_probabilities():
    gen = torch.Generator().manual_seed(1)
    grad = torch.randn(64, generator=gen, dtype=torch.float64)
    scaler, repeats = local_scaler(grad), 20_000
    codes = _draws(grad, scaler, repeats)
    assert set(codes.unique().tolist()) <= {-1.0, 0.0, 1.0}
    assert torch.all((codes == 0) | (codes == torch.sign(grad)))  # sign is kept or zeroed
    p = (grad.abs() / scaler).clamp(max=1)
    # Bernoulli frequencies: within 5 standard errors for every element
    tolerance = 5 * torch.sqrt(p * (1 - p) / repeats) + 1e-12
    assert torch.all(((codes != 0).double().mean(0) - p).abs() <= tolerance)
    mean = scaler * codes.mean(0)
    assert torch.all((mean - grad).abs() <= scaler * tolerance)


def test_zero_gradient_and_elements_at_the_scaler():
    gen = torch.Generator().manual_seed(0)
    assert torch.equal(ternarize(torch.zeros(5), 0.0, gen), torch.zeros(5, dtype=torch.int8))
    grad = torch.tensor([2.0, -2.0, 0.0])
    assert ternarize(grad, 2.0, gen).tolist() == [1, -1, 0]  # |g| = s: always kept


def test_clipping_at_2_5_sigma_shrinks_and_rotates_a_gaussian_slightly():
    grad = torch.randn(2_000_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    clipped = clip_by_std(grad, 2.5)
    assert float(clipped.abs().max()) == pytest.approx(2.5 * float(grad.std()), rel=1e-3)
    shrink = 1 - float(clipped.norm() / grad.norm())
    angle = math.degrees(math.acos(float(clipped @ grad / (clipped.norm() * grad.norm()))))
    assert shrink == pytest.approx(0.011, abs=0.002)
    assert angle == pytest.approx(2.7, abs=0.3)
    assert torch.equal(clip_by_std(grad, 0.0), grad)
