"""``trainer.precision``: which schedulers take fp16, what fp32/bf16/fp16 do to one training
step, the ``:inf`` fault, and the RNG states a checkpoint keeps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradsync.config.schema import Precision
from gradsync.jobs.compose import ConfigError, check_config, compose_jobs
from gradsync.schedulers.registry import SCHEDULERS
from gradsync.train.checkpoint import restore_rng, rng_state
from gradsync.train.faults import FaultPlan, InjectedFault
from gradsync.train.precision import LOSS_SCALE_METRIC, MixedPrecision
from tests.unit.test_registry import _compose

CPU = torch.device("cpu")
GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _servers(name: str) -> str:
    return f"trainer.servers={SCHEDULERS[name].capabilities.servers or 1}"


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_every_scheduler_takes_bf16_and_fp16_exactly_where_its_entry_says_so(name):
    cfg = _compose(f"scheduler={name}", _servers(name), "trainer.precision=bf16")
    check_config(cfg, launcher_here=False, machine=False)
    cfg.trainer.precision = "fp16"
    if SCHEDULERS[name].capabilities.loss_scaling:
        check_config(cfg, launcher_here=False, machine=False)
        return
    with pytest.raises(ConfigError, match=f"scheduler={name} .* use trainer.precision=bf16"):
        check_config(cfg, launcher_here=False, machine=False)


def test_an_unknown_precision_is_one_line():
    with pytest.raises(ConfigError, match=r"trainer\.precision=fp8: Invalid value") as caught:
        compose_jobs(["trainer.precision=fp8"], multirun=False, machine=False)
    assert "\n" not in str(caught.value)


def test_the_default_precision_is_fp32():
    assert _compose().trainer.precision is Precision.fp32


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def _grads(precision: MixedPrecision | None) -> list[torch.Tensor]:
    model = _model()
    x, y = torch.randn(4, 6, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 2, 0])
    if precision is None:  # training as it was before there was a precision setting
        nn.functional.cross_entropy(model(x), y).backward()
    else:
        with precision.autocast():
            loss = nn.functional.cross_entropy(model(x), y)
        precision.backward(loss)
    return [p.grad.clone() for p in model.parameters()]


def test_fp32_trains_bit_for_bit_as_before():
    fp32 = MixedPrecision(Precision.fp32, CPU)
    assert fp32.loss_scale is None and fp32.metrics() == {} and fp32.state_dict() == {}
    for got, want in zip(_grads(fp32), _grads(None), strict=True):
        assert torch.equal(got, want)


def test_bf16_computes_the_forward_pass_in_bf16_and_keeps_float32_gradients():
    bf16 = MixedPrecision(Precision.bf16, CPU)
    with bf16.autocast():
        assert _model()(torch.randn(2, 6)).dtype is torch.bfloat16
    grads, reference = _grads(bf16), _grads(None)
    assert bf16.loss_scale is None
    assert all(g.dtype is torch.float32 for g in grads)
    assert any(not torch.equal(g, r) for g, r in zip(grads, reference, strict=True))
    for got, want in zip(grads, reference, strict=True):
        torch.testing.assert_close(got, want, rtol=0.05, atol=0.02)


def test_fp16_scales_the_loss_and_checkpoints_its_scale():
    fp16 = MixedPrecision(Precision.fp16, CPU)
    assert fp16.loss_scale is not None
    with fp16.autocast():
        assert _model()(torch.randn(2, 6)).dtype is torch.float16
    scale = fp16.metrics()[LOSS_SCALE_METRIC]
    grads = _grads(fp16)  # scaled: the engine unscales them
    reference = _grads(None)
    torch.testing.assert_close(grads[0] / scale, reference[0], rtol=0.05, atol=1e-3)
    fp16.loss_scale.scaler.update(scale / 4)
    resumed = MixedPrecision(Precision.fp16, CPU)
    resumed.load_state_dict(fp16.state_dict())
    assert resumed.metrics() == {LOSS_SCALE_METRIC: scale / 4}
    resumed.load_state_dict({})  # a checkpoint of an fp32 run: nothing to continue from
    assert resumed.metrics() == {LOSS_SCALE_METRIC: scale / 4}


def test_the_inf_fault_overflows_one_rank_at_one_step_and_raises_nothing():
    spec = "1:3:inf"
    loss = torch.tensor(2.0)
    faulty, healthy = FaultPlan(rank=1, spec=spec, slow_spec=""), FaultPlan(rank=0, spec=spec)
    for step in range(5):
        faulty.check(step)
        healthy.check(step)
        assert healthy.differentiated(loss, step) is loss
        got = faulty.differentiated(loss, step)
        assert torch.isinf(got) if step == 3 else got is loss
    with pytest.raises(InjectedFault):
        FaultPlan(rank=1, spec="1:3", slow_spec="").check(3)


def _draws(device: torch.device) -> torch.Tensor:
    return torch.rand(4, device=device)


def test_a_cpu_checkpoint_keeps_the_cpu_generator_and_no_gpu_state():
    state = rng_state(CPU)
    assert set(state) == {"rng"}
    expected = _draws(CPU)
    _draws(CPU)
    restore_rng(state, CPU)
    assert torch.equal(_draws(CPU), expected)


@pytest.mark.parametrize("device", [pytest.param("cuda", marks=GPU)])
def test_a_gpu_checkpoint_keeps_the_gpu_generator_too(device):
    cuda = torch.device(device, torch.cuda.current_device())
    state = rng_state(cuda)
    assert set(state) == {"rng", "cuda_rng"}
    expected_cpu, expected_gpu = _draws(CPU), _draws(cuda)
    _draws(CPU), _draws(cuda)
    restore_rng(state, cuda)
    assert torch.equal(_draws(CPU), expected_cpu)
    assert torch.equal(_draws(cuda), expected_gpu)
