"""``compressor=dgc`` on one worker against the equations of Lin et al. (ICLR 2018) on hand-made
tensors: local clipping, momentum correction, momentum factor masking, the warm-up; its state
through a checkpoint, and the engine applying what it sent. Two workers: tests/dist/test_dgc.py."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from gradsync.comm.solo import SoloCollective
from gradsync.compressors.code_paths import gpu_branches
from gradsync.compressors.dgc import DGCCompressor
from gradsync.compressors.whole_clip import WholeGradientClip
from gradsync.feedback import auto
from gradsync.feedback.none import NoneFeedback
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from gradsync.train import checkpoint
from gradsync.types import GroupInfo, TensorPart


class _World(SoloCollective):
    """One worker that believes it is one of ``world_size`` (clipping scales by N^(-1/2))."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size


def _send(compressor: DGCCompressor, grad: list[float], *, epoch: int = 0) -> dict[int, float]:
    """{index: value} this worker sends for ``grad``."""
    payload, _ = compressor.compress(
        torch.tensor(grad, dtype=torch.float32), group=GroupInfo("g", 0, epoch)
    )
    values, indices = payload
    return dict(zip(indices.tolist(), values.tolist(), strict=True))


def _u_v(compressor: DGCCompressor) -> tuple[list[float], list[float]]:
    state = compressor.state_dict()
    return state["u/g"].tolist(), state["v/g"].tolist()


def test_momentum_correction_and_masking_over_three_steps():
    # 4 elements at density 0.25: k = 1. m = 0.5. Worked by hand from u ← m·u + g, v ← v + u,
    # send top-1 of |v|, then zero u and v where sent.
    dgc = DGCCompressor(density=0.25, momentum=0.5)
    assert _send(dgc, [4, 1, 0, 0]) == {0: 4.0}  # u = v = [4, 1, 0, 0]
    assert _u_v(dgc) == ([0, 1, 0, 0], [0, 1, 0, 0])
    assert _send(dgc, [0, 1, 2, 0]) == {1: 2.5}  # u = [0, 1.5, 2, 0], v = [0, 2.5, 2, 0]
    assert _u_v(dgc) == ([0, 0, 2, 0], [0, 0, 2, 0])
    assert _send(dgc, [0, 0, 0, 1]) == {2: 3.0}  # u = [0, 0, 1, 1], v = [0, 0, 3, 1]
    assert _u_v(dgc) == ([0, 0, 0, 1], [0, 0, 0, 1])


def test_the_logged_error_norm_is_the_unsent_velocity():
    dgc = DGCCompressor(density=0.25, momentum=0.5)
    _send(dgc, [4, 1, 0, 0])
    _send(dgc, [0, 1, 2, 0])  # v = [0, 0, 2, 0] after masking
    sync = AllreduceSync(
        compressor=dgc,
        feedback=NoneFeedback(),
        collective=SoloCollective(),
        clock=time.perf_counter,
    )
    assert float(sync.memory_norm()) == pytest.approx(2.0)


def test_without_masking_the_velocity_would_resend():
    # Masking zeroes u too: element 0's momentum is not carried into the next steps.
    dgc = DGCCompressor(density=0.25, momentum=0.9)
    _send(dgc, [10, 0, 0, 0])
    assert _send(dgc, [0, 0, 0, 1]) == {3: 1.0}  # unmasked, u[0] = 9 would win again


def test_local_clipping_scales_the_gradient_to_clip_norm_over_root_n():
    # ‖g‖ = 5 with 4 workers and clip_norm 2: the threshold is 2·4^(-1/2) = 1, so g/5 joins u.
    dgc = DGCCompressor(density=0.25, momentum=0.0, clip_norm=2.0)
    dgc.bind(_World(4))
    sent = _send(dgc, [3, 4, 0, 0])
    assert sent == {1: pytest.approx(0.8)}
    u, v = _u_v(dgc)
    assert u == pytest.approx([0.6, 0, 0, 0]) and v == pytest.approx([0.6, 0, 0, 0])
    # Under the threshold, g is left as it is.
    small = DGCCompressor(density=0.25, momentum=0.0, clip_norm=100.0)
    assert _send(small, [3, 4, 0, 0]) == {1: 4.0}


def test_clipping_is_one_norm_over_the_whole_group():
    # Two "layers" of the group: the norm is taken over both (the paper's global norm); the
    # group's top-1 is sent.
    dgc = DGCCompressor(density=0.125, momentum=0.0, clip_norm=1.0, selection="group")
    grad = torch.tensor([3.0, 0, 0, 0, 4, 0, 0, 0])
    payload, _ = dgc.compress(grad, group=GroupInfo.of_sizes("g", 0, [4, 4]))
    assert payload[0].tolist() == pytest.approx([4 / 5])


def test_warmup_sends_the_scheduled_k():
    n = 1000
    dgc = DGCCompressor(density=0.001, warmup_epochs=4, warmup_density=0.25)
    grad = torch.randn(n, generator=torch.Generator().manual_seed(0))
    counts = [dgc.compress(grad, group=GroupInfo("g", e, e))[0][0].numel() for e in (0, 1, 2, 3, 4)]
    assert counts == [250, 62, 15, 3, 1]  # int(n · 0.25·0.004^(e/4)), then int(n · 0.001)
    assert [dgc.density_at(e) for e in (4, 7)] == [0.001, 0.001]


def test_feedback_auto_keeps_no_residual_for_dgc():
    assert isinstance(auto.for_compressor(DGCCompressor(density=0.01)), NoneFeedback)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def _sync(model: nn.Module, compressor: DGCCompressor, lr: float = 0.1) -> AllreduceSync:
    sync = AllreduceSync(
        compressor=compressor,
        feedback=NoneFeedback(),
        collective=SoloCollective(),
        clock=time.perf_counter,
    )
    sync.attach(model, torch.optim.SGD(model.parameters(), lr=lr, momentum=0.0))
    return sync


def _train(sync: AllreduceSync, model: nn.Module, steps: range) -> None:
    for step in steps:
        gen = torch.Generator().manual_seed(step)
        x, y = torch.randn(16, 6, generator=gen), torch.randint(0, 3, (16,), generator=gen)
        model.zero_grad()
        sync.begin(step=step)
        nn.functional.cross_entropy(model(x), y).backward()
        sync.step(step=step)


def test_the_engine_applies_the_sent_velocity():
    # Step 1: u = v = g. SGD (lr 1, no momentum) moves the weights by what was sent; what was
    # not sent stays in v: the two add up to the gradient, and never overlap.
    model = _model()
    before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    dgc = DGCCompressor(density=0.1, momentum=0.9)
    sync = _sync(model, dgc, lr=1.0)
    sync.begin(step=0)
    nn.functional.cross_entropy(model(torch.randn(16, 6)), torch.randint(0, 3, (16,))).backward()
    grad = torch.cat([p.grad.reshape(-1).clone() for p in model.parameters()])
    sync.step(step=0)
    sync.close()
    moved = before - torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    left = dgc.state_dict()[f"v/{sync.group_name(0)}"]  # one group, in model order
    sent = moved != 0
    assert int(sent.sum()) == int(0.1 * grad.numel())
    assert not bool((left[sent] != 0).any())
    torch.testing.assert_close(moved + left, grad)


def test_a_checkpoint_resumes_exactly(tmp_path: Path):
    model, resumed_model = _model(), _model()
    sync = _sync(model, DGCCompressor(density=0.1, momentum=0.9))
    _train(sync, model, range(3))
    checkpoint.save(
        tmp_path,
        rank=0,
        world_size=1,
        position=checkpoint.Position(epoch=0, batch_in_epoch=3, step=3),
        common={},
        local={"sync": sync.state_dict(), "model": model.state_dict()},
        barrier=lambda: None,
    )
    _, local, _ = checkpoint.load(checkpoint.resolve_checkpoint(tmp_path), rank=0)
    assert any(key.startswith("v/") for key in local["sync"]["compressor"])
    resumed_model.load_state_dict(local["model"])
    resumed = _sync(resumed_model, DGCCompressor(density=0.1, momentum=0.9))
    resumed.load_state_dict(local["sync"])
    _train(sync, model, range(3, 6))
    _train(resumed, resumed_model, range(3, 6))
    sync.close()
    resumed.close()
    for a, b in zip(model.parameters(), resumed_model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_state_of_another_compressor_is_refused():
    with pytest.raises(ValueError, match="DGCCompressor keeps u/ and v/"):
        DGCCompressor(density=0.1).load_state_dict({"group0": torch.zeros(3)})


def test_memory_follows_the_tensors_when_the_groups_change():
    # A scheduler re-plans (OMGS after profiling): tensors 0 and 1 were one group, now two.
    dgc = DGCCompressor(density=0.25, momentum=0.0)
    both = (TensorPart(0, (4,)), TensorPart(1, (4,)))
    dgc.compress(torch.tensor([9.0, 1, 2, 3, 4, 5, 6, 7]), group=GroupInfo("group0", 0, 0, both))
    # v after masking the top-2 (9 and 7): [0, 1, 2, 3 | 4, 5, 6, 0]
    dgc.compress(torch.zeros(4), group=GroupInfo("group0", 1, 0, both[1:]))
    dgc.compress(torch.zeros(4), group=GroupInfo("group1", 1, 0, both[:1]))
    state = dgc.state_dict()
    # Each new group's v is its tensor's, less the one element it sent (k = 1).
    assert state["v/group0"].tolist() == [4, 5, 0, 0]
    assert state["v/group1"].tolist() == [0, 1, 2, 0]


def test_a_skipped_step_gives_back_memory_that_a_re_plan_still_carries():
    # fp16: a step every worker skips restores the memory; the next step may be a re-plan's
    # first, and must still find which tensors each group's memory belongs to.
    dgc = DGCCompressor(density=0.25, momentum=0.0)
    both = (TensorPart(0, (4,)), TensorPart(1, (4,)))
    dgc.compress(torch.tensor([9.0, 1, 2, 3, 4, 5, 6, 7]), group=GroupInfo("group0", 0, 0, both))
    kept = dgc.snapshot()
    dgc.compress(torch.full((8,), 100.0), group=GroupInfo("group0", 1, 0, both))  # skipped
    dgc.restore(kept)
    dgc.compress(torch.zeros(4), group=GroupInfo("group0", 2, 0, both[1:]))
    dgc.compress(torch.zeros(4), group=GroupInfo("group1", 2, 0, both[:1]))
    state = dgc.state_dict()
    assert state["v/group0"].tolist() == [4, 5, 0, 0]
    assert state["v/group1"].tolist() == [0, 1, 2, 0]


ROUTES = {"cpu": contextlib.nullcontext, "gpu": gpu_branches}
"""Eager, or along the GPU's route (its fused kernels compiled)."""


@pytest.mark.parametrize("route", ROUTES)
def test_clipping_norm_is_the_whole_gradients_whatever_the_groups(route):
    """One tensor per group (as lags hands them over): the first step clips each by its own
    norm (no whole gradient known yet), later steps by the previous step's whole-gradient norm;
    a group that is the whole model uses its own, the current one. An fp16 step that overflowed
    does not become the norm."""
    with ROUTES[route]():
        _clip_by_the_whole_gradient()


def _clip_by_the_whole_gradient() -> None:
    clip = WholeGradientClip()
    parts = [TensorPart(0, (2,)), TensorPart(1, (2,))]
    first, second = torch.tensor([3.0, 4.0]), torch.tensor([0.0, 12.0])

    def group(step: int, j: int) -> GroupInfo:
        return GroupInfo(f"t{j}", step, parts=(parts[j],), model_tensors=2)

    assert float(clip.coefficient(first, group(0, 0), 1.0)) == pytest.approx(1 / 5, rel=1e-5)
    assert float(clip.coefficient(second, group(0, 1), 1.0)) == pytest.approx(1 / 12, rel=1e-5)
    # Step 1: ‖(3, 4, 0, 12)‖ = 13 from step 0, whatever this step's gradients are.
    for j in (0, 1):
        assert float(clip.coefficient(first * 0, group(1, j), 1.0)) == pytest.approx(1 / 13)
    whole = GroupInfo("all", 2, parts=tuple(parts), model_tensors=2)
    assert float(clip.coefficient(torch.tensor([6.0, 8, 0, 0]), whole, 1.0)) == pytest.approx(0.1)
    inf = torch.tensor([float("inf"), 0.0])
    clip.coefficient(inf, group(3, 0), 1.0)  # overflowed: step 3's norm is not kept
    assert float(clip.coefficient(first, group(4, 0), 1.0)) == pytest.approx(0.1)


@pytest.mark.parametrize("route", ROUTES)
def test_a_first_step_that_overflowed_leaves_no_norm_behind(route):
    """Under fp16 the first steps often overflow (and are skipped): their inf or NaN norm is
    never used; the group's own norm is, until a finite step has been seen."""
    with ROUTES[route]():
        _clip_after_an_overflow()


def _clip_after_an_overflow() -> None:
    for bad in (float("inf"), float("nan")):
        clip = WholeGradientClip()

        def group(step: int) -> GroupInfo:
            return GroupInfo("t0", step, parts=(TensorPart(0, (2,)),), model_tensors=2)

        clip.coefficient(torch.tensor([bad, 0.0]), group(0), 1.0)
        coefficient = clip.coefficient(torch.tensor([3.0, 4.0]), group(1), 1.0)
        assert float(coefficient) == pytest.approx(1 / 5, rel=1e-5)
        assert float(clip.coefficient(torch.tensor([0.0, 1.0]), group(2), 1.0)) == pytest.approx(
            1 / 5, rel=1e-5
        )


def test_a_resumed_dgc_clips_as_the_uninterrupted_one():
    """The previous step's norm is part of the checkpoint: a DGC restored from it after a step
    of one-tensor groups clips the next step by that step's whole gradient, as the one that
    went on."""
    parts = (TensorPart(0, (2,)), TensorPart(1, (2,)))

    def run(dgc: DGCCompressor, step: int, grads: list[list[float]]) -> list[torch.Tensor]:
        return [
            dgc.compress(
                torch.tensor(g), group=GroupInfo(f"t{j}", step, parts=(parts[j],), model_tensors=2)
            )[0][0]
            for j, g in enumerate(grads)
        ]

    going_on = DGCCompressor(density=0.5, momentum=0.0, clip_norm=1.0, exchange="allgather")
    run(going_on, 0, [[3.0, 0.0], [0.0, 4.0]])
    resumed = DGCCompressor(density=0.5, momentum=0.0, clip_norm=1.0, exchange="allgather")
    resumed.load_state_dict(going_on.state_dict())
    later = [[6.0, 0.0], [0.0, 8.0]]
    sent = run(resumed, 1, later)
    # Clipped by step 0's whole norm, 5 (each tensor's own would give 1.0 and 1.0).
    assert [float(values[0]) for values in sent] == pytest.approx([1.2, 1.6])
    for a, b in zip(run(going_on, 1, later), sent, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("exchange", ["allgather", "union"])
def test_the_gpus_route_sends_and_keeps_what_the_cpus_does(exchange):
    """On the GPU's route DGC accumulates in one compiled kernel and selects every tensor's
    top-k with the segmented top-k; on a CPU, eagerly and with ``LayerwiseTopK``. Both send
    the same elements and keep the same u and v, step after step (clipped, fp32)."""
    sizes = [300, 7, 2100, 1, 64, 5000]
    parts = tuple(TensorPart(i, (n,)) for i, n in enumerate(sizes))

    def steps(dgc: DGCCompressor) -> list[tuple[list[int], torch.Tensor, torch.Tensor]]:
        sent = []
        for step in range(3):
            grad = torch.randn(sum(sizes), generator=torch.Generator().manual_seed(step))
            group = GroupInfo("g", step, 0, parts=parts, model_tensors=len(parts))
            payload, ctx = dgc.compress(grad, group=group)
            state = dgc.state_dict()
            indices = dgc.selected(payload, ctx)
            sent.append((sorted(indices.tolist()), state["u/g"], state["v/g"]))
        return sent

    def make() -> DGCCompressor:
        return DGCCompressor(density=0.01, momentum=0.9, clip_norm=5.0, exchange=exchange)

    eager = steps(make())
    with gpu_branches():
        compiled = steps(make())
    for (want, u, v), (got, cu, cv) in zip(eager, compiled, strict=True):
        assert got == want
        torch.testing.assert_close(cu, u, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(cv, v, rtol=1e-6, atol=1e-7)
