"""The quantizers on one worker (TernGrad, QSGD, EF-signSGD, fp16/bf16), checked through the
compressors' own payloads against what their pages say (docs/methods/compressors/terngrad.md,
"What the tests check"; qsgd.md, signsgd.md, fp16.md and bf16.md there, "How it works"), and
the error-feedback policy (docs/methods/feedback.md, "Which compressors keep a residual")."""

from __future__ import annotations

import math

import pytest
import torch

from gradsync.compressors.bf16 import BF16Compressor
from gradsync.compressors.cltk import CLTKCompressor
from gradsync.compressors.fp16 import FP16Compressor
from gradsync.compressors.none import NoneCompressor
from gradsync.compressors.qsgd import QSGDCompressor, bits_for_levels
from gradsync.compressors.signsgd import SignSGDCompressor
from gradsync.compressors.ternary import clip_by_std
from gradsync.compressors.terngrad import TernGradCompressor
from gradsync.compressors.topk import TopKCompressor
from gradsync.feedback import auto
from gradsync.feedback.none import NoneFeedback
from gradsync.feedback.residual import ResidualFeedback
from gradsync.types import GroupInfo

SIZES = [301, 50, 97, 7, 70, 10]  # the last two: a 7x10 classifier's weight and bias
NUMEL = sum(SIZES)


def _gradient(seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    scales = torch.cat([torch.full((n,), 0.1 * (i + 1)) for i, n in enumerate(SIZES)])
    return torch.randn(NUMEL, generator=gen, dtype=torch.float64).float() * scales


def _parts(flat: torch.Tensor) -> list[torch.Tensor]:
    return list(flat.split(SIZES))


def _round_trip(compressor, grad, *, step=0, epoch=0):
    payload, ctx = compressor.compress(
        grad, group=GroupInfo.of_sizes("all", step, SIZES, epoch=epoch)
    )
    return payload, ctx, compressor.decompress(payload, ctx)


def _payload_bytes(payload) -> int:
    return sum(t.numel() * t.element_size() for t in payload)


# ---- TernGrad -------------------------------------------------------------------------------
def test_terngrad_values_are_plus_minus_the_scaler_or_zero_and_the_classifier_is_exact():
    grad = _gradient()
    _, ctx, out = _round_trip(TernGradCompressor(), grad)
    scalers = ctx.agreed_scales
    assert scalers.numel() == len(SIZES) - 2
    for j, (part, sent) in enumerate(zip(_parts(grad)[:-2], _parts(out)[:-2], strict=True)):
        s = float(scalers[j])
        assert s == pytest.approx(float(clip_by_std(part, 2.5).abs().max()))
        assert set(sent.unique().tolist()) <= {-s, 0.0, s}
        # sign(t_k) is 0 or sign(g_k)
        assert torch.all(sent * part >= 0)
    assert torch.equal(out[-(SIZES[-1] + SIZES[-2]) :], grad[-(SIZES[-1] + SIZES[-2]) :])


def test_terngrad_quantize_last_ternarizes_the_classifier_too():
    _, ctx, out = _round_trip(TernGradCompressor(quantize_last=True), _gradient())
    assert ctx.agreed_scales.numel() == len(SIZES)
    last = _parts(out)[-1]
    assert last.unique().numel() <= 3


@pytest.mark.parametrize("clip", [2.5, 0.0])
def test_terngrad_is_unbiased_for_the_clipped_gradient(clip):
    grad = _gradient(1)
    compressor = TernGradCompressor(clip=clip, quantize_last=True)
    repeats = 4000
    total = torch.zeros(NUMEL, dtype=torch.float64)
    for step in range(repeats):
        total += _round_trip(compressor, grad, step=step)[2].double()
    mean = total / repeats
    target = torch.cat([clip_by_std(p, clip) for p in _parts(grad)]).double()
    _, ctx, _ = _round_trip(compressor, grad)
    scalers = torch.repeat_interleave(ctx.agreed_scales.double(), torch.tensor(SIZES))
    # Var(t_k) = s|g_k| - g_k^2 <= s|g_k|: allow 5 standard errors of the mean per element.
    bound = 5 * torch.sqrt(scalers * target.abs() / repeats) + 1e-6
    assert torch.all((mean - target).abs() <= bound), float(((mean - target).abs() / bound).max())
    if clip == 0:
        torch.testing.assert_close(target, grad.double())


def test_terngrad_variance_is_within_the_bound_of_assumption_3():
    grad = _gradient(2)
    compressor = TernGradCompressor(quantize_last=True)
    draws = torch.stack([_round_trip(compressor, grad, step=s)[2].double() for s in range(800)])
    clipped = torch.cat([clip_by_std(p, 2.5) for p in _parts(grad)]).double()
    scalers = _round_trip(compressor, grad)[1].agreed_scales.double()
    variance = ((draws - clipped) ** 2).mean(dim=0)
    for j, (var, g) in enumerate(zip(variance.split(SIZES), clipped.split(SIZES), strict=True)):
        assert float(var.sum()) <= 1.1 * float(scalers[j]) * float(g.abs().sum())


def test_clipping_cuts_the_variance_a_few_outliers_cause():
    # Why clip: one outlier sets the scaler, and every other element then flips between 0 and
    # that large value. Clipping trades a little bias (on the few outliers) for less variance.
    grad = _gradient(4)
    grad[[5, 350, 420]] *= 10
    variance, bias = {}, {}
    for clip in (0.0, 2.5):
        compressor = TernGradCompressor(clip=clip, quantize_last=True)
        draws = torch.stack([_round_trip(compressor, grad, step=s)[2] for s in range(300)])
        variance[clip] = float(draws.var(dim=0).sum())
        bias[clip] = float(((draws.mean(dim=0) - grad) ** 2).sum())
    assert variance[2.5] < 0.5 * variance[0.0], variance
    assert variance[2.5] + bias[2.5] < variance[0.0] + bias[0.0], (variance, bias)


def test_terngrad_sends_two_bits_per_element_plus_the_classifier():
    grad = _gradient()
    quantized, classifier = sum(SIZES[:-2]), SIZES[-2] + SIZES[-1]
    shared, _, _ = _round_trip(TernGradCompressor(), grad)
    assert _payload_bytes(shared) == math.ceil(quantized / 4) + 4 * classifier
    own, _, _ = _round_trip(TernGradCompressor(share_scalers=False), grad)
    assert _payload_bytes(own) == _payload_bytes(shared) + 4 * (len(SIZES) - 2)


def test_terngrad_draws_depend_on_rank_and_step_and_repeat_with_the_seed():
    grad = _gradient()
    first = _round_trip(TernGradCompressor(seed=1), grad, step=3)[0][0]
    assert torch.equal(first, _round_trip(TernGradCompressor(seed=1), grad, step=3)[0][0])
    assert not torch.equal(first, _round_trip(TernGradCompressor(seed=1), grad, step=4)[0][0])
    assert not torch.equal(first, _round_trip(TernGradCompressor(seed=2), grad, step=3)[0][0])


def test_terngrad_float_epochs_send_the_exact_gradient():
    grad = _gradient()
    compressor = TernGradCompressor(float_every_epochs=3)
    for epoch in range(6):
        payload, _, out = _round_trip(compressor, grad, epoch=epoch)
        if epoch in (2, 5):  # the 3rd and 6th epochs
            assert torch.equal(out, grad)
            assert _payload_bytes(payload) == 4 * NUMEL
        else:
            assert not torch.equal(out, grad)


# ---- QSGD -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("levels", "bits"), [(1, 2), (7, 4), (8, 8), (127, 8)])
def test_qsgd_codes_take_the_fewest_bits_that_hold_them(levels, bits):
    assert bits_for_levels(levels) == bits
    payload, _, _ = _round_trip(QSGDCompressor(levels=levels), _gradient())
    assert payload[0].numel() == math.ceil(NUMEL * bits / 8)


def test_qsgd_rejects_levels_outside_a_byte():
    with pytest.raises(ValueError, match="levels must be in"):
        bits_for_levels(128)


@pytest.mark.parametrize("levels", [1, 4])
def test_qsgd_values_lie_on_the_norm_grid_and_are_unbiased(levels):
    grad = _gradient(3)
    compressor = QSGDCompressor(levels=levels)
    repeats = 3000
    total = torch.zeros(NUMEL, dtype=torch.float64)
    for step in range(repeats):
        out = _round_trip(compressor, grad, step=step)[2]
        total += out.double()
    for part, sent in zip(_parts(grad), _parts(out), strict=True):
        unit = float(torch.linalg.vector_norm(part)) / levels
        grid = (sent / unit).double()
        torch.testing.assert_close(grid, grid.round(), atol=1e-4, rtol=0)
        # The sent norm is summed in another order than vector_norm's: equal to float rounding.
        assert grid.abs().max() <= levels * (1 + 1e-6)
    norms = torch.repeat_interleave(
        torch.stack([torch.linalg.vector_norm(p.double()) for p in _parts(grad)]),
        torch.tensor(SIZES),
    )
    # Each element is one of two adjacent grid points: variance <= (unit/2)^2.
    bound = 5 * (norms / levels / 2) / math.sqrt(repeats) + 1e-6
    assert torch.all((total / repeats - grad.double()).abs() <= bound)


# ---- EF-signSGD -----------------------------------------------------------------------------
def test_signsgd_sends_the_sign_scaled_by_the_mean_magnitude_at_one_bit():
    grad = _gradient()
    payload, _, out = _round_trip(SignSGDCompressor(), grad)
    assert payload[0].numel() == math.ceil(NUMEL / 8)
    for part, sent in zip(_parts(grad), _parts(out), strict=True):
        expected = part.abs().mean() * torch.where(part >= 0, 1.0, -1.0)
        torch.testing.assert_close(sent, expected)


def test_signsgd_with_error_feedback_conserves_the_gradient():
    compressor, feedback = SignSGDCompressor(), ResidualFeedback()
    sent = torch.zeros(NUMEL)
    produced = torch.zeros(NUMEL)
    for step in range(20):
        grad = _gradient(step)
        produced += grad
        compensated = feedback.compensate(grad, name="all")
        payload, ctx = compressor.compress(
            compensated, group=GroupInfo.of_sizes("all", step, SIZES)
        )
        transmitted = compressor.decompress(payload, ctx)
        feedback.update(compensated, transmitted, name="all")
        sent += transmitted
    # Everything produced was either sent or is still in the residual.
    torch.testing.assert_close(sent + feedback.state_dict()["all"], produced, atol=1e-4, rtol=0)


# ---- shared by every quantizer ----------------------------------------------------------------
QUANTIZERS = {
    "terngrad": lambda: TernGradCompressor(quantize_last=True),
    "terngrad-noshare": lambda: TernGradCompressor(share_scalers=False, clip=0),
    "qsgd": lambda: QSGDCompressor(levels=3),
    "signsgd": SignSGDCompressor,
    "fp16": FP16Compressor,
    "bf16": BF16Compressor,
}


@pytest.mark.parametrize("name", QUANTIZERS)
def test_zero_gradient_gives_zero(name):
    _, _, out = _round_trip(QUANTIZERS[name](), torch.zeros(NUMEL))
    assert torch.equal(out, torch.zeros(NUMEL))


@pytest.mark.parametrize("numel", [1, 2, 3, 5, 9])
@pytest.mark.parametrize("name", ["terngrad", "qsgd", "signsgd"])
def test_lengths_that_do_not_fill_the_last_byte(name, numel):
    grad = torch.linspace(-1, 1, numel)
    compressor = QUANTIZERS[name]()
    payload, ctx = compressor.compress(grad, group=GroupInfo("g", 0))
    out = compressor.decompress(payload, ctx)
    assert out.shape == grad.shape
    assert torch.all(out * grad >= 0) or name == "signsgd"


@pytest.mark.parametrize(("name", "dtype"), [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_narrow_floats_round_to_the_nearest_value_of_their_type(name, dtype):
    grad = _gradient()
    payload, _, out = _round_trip(QUANTIZERS[name](), grad)
    assert payload[0].dtype == dtype and out.dtype == grad.dtype
    assert _payload_bytes(payload) == 2 * NUMEL
    assert torch.equal(out, grad.to(dtype).float())
    # Half an ulp relative, or half the subnormal spacing of fp16 near zero.
    eps = torch.finfo(dtype).eps
    assert torch.all((out - grad).abs() <= eps / 2 * grad.abs() + 2.0**-25)


# ---- feedback=auto ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("compressor", "kind"),
    [
        (NoneCompressor(), NoneFeedback),
        (TernGradCompressor(), NoneFeedback),
        (QSGDCompressor(), NoneFeedback),
        (FP16Compressor(), NoneFeedback),
        (SignSGDCompressor(), ResidualFeedback),
        (TopKCompressor(density=0.1), ResidualFeedback),
        (CLTKCompressor(density=0.1), ResidualFeedback),
    ],
    ids=lambda x: type(x).__name__ if not isinstance(x, type) else x.__name__,
)
def test_auto_feedback_follows_the_published_method(compressor, kind):
    assert type(auto.for_compressor(compressor)) is kind
