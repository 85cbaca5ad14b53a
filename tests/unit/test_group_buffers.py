"""The engine's reused gradient-sized buffers: two that take turns per group, kept across steps
on every device; a skipped step's turn is taken back; every compressor decompresses into a
given tensor as into a new one."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from gradsync.compressors.topk import TopKCompressor
from gradsync.config.instantiate import build
from gradsync.jobs.compose import CONFIG_MODULE
from gradsync.jobs.discovery import group_options
from gradsync.schedulers.engine.combine import combine
from gradsync.schedulers.engine.group_buffers import GroupBuffers
from gradsync.types import GroupInfo, OwnMemory, TensorPart


def _pointers(buffers: GroupBuffers, steps: int, *, stepped: bool = True) -> list[int]:
    like = torch.zeros(3)
    seen = []
    for _ in range(steps):
        flat = buffers.flat(0, 10, like)
        assert flat is not None and flat.numel() == 10
        seen.append(flat.data_ptr())
        buffers.settle(stepped=stepped)
    return seen


def test_two_buffers_take_turns_and_are_kept_across_steps():
    a, b, c, d = _pointers(GroupBuffers(), 4)
    assert a != b and (a, b) == (c, d)


def test_a_skipped_step_gives_its_turn_back():
    buffers = GroupBuffers()
    (first,) = _pointers(buffers, 1)
    skipped, again = _pointers(buffers, 2, stepped=False)
    # The feedback keeps the first step's buffer as its residual through the skip.
    assert skipped == again != first


def test_groups_keep_buffers_of_their_own_and_new_sizes_get_new_ones():
    buffers = GroupBuffers()
    like = torch.zeros(1)
    zero, one = buffers.flat(0, 10, like), buffers.flat(1, 10, like)
    assert zero is not None and one is not None and zero.data_ptr() != one.data_ptr()
    buffers.settle(stepped=True)
    resized = buffers.flat(0, 12, like)
    assert resized is not None and resized.numel() == 12
    buffers.clear()
    assert _pointers(buffers, 1)[0] not in {zero.data_ptr(), one.data_ptr()}


def test_gathered_payloads_are_summed_into_the_kept_tensor_whatever_it_held():
    compressor = TopKCompressor(density=0.5, exchange="allgather")
    info = GroupInfo(name="g", step=0, epoch=0)
    grads = [torch.tensor([4.0, -1.0, 0.5, -3.0]), torch.tensor([0.1, 2.0, -5.0, 0.2])]
    sent = [compressor.compress(g, group=info) for g in grads]
    ctx = sent[0][1]
    fresh, _ = combine(compressor, [p for p, _ in sent], ctx, like=grads[0])
    kept = GroupBuffers().summed(0, grads[0])
    assert kept is not None
    kept.fill_(7.0)  # last step's sum, still there
    reused, _ = combine(compressor, [p for p, _ in sent], ctx, like=grads[0], out=kept)
    assert reused.data_ptr() == kept.data_ptr()
    assert torch.equal(reused, fresh)


@pytest.mark.parametrize("name", group_options()["compressor"])
def test_every_compressor_decompresses_into_a_given_tensor_as_into_a_new_one(name):
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose("train", overrides=[f"compressor={name}"])
    compressor = build(cfg.compressor, path="compressor")
    # A matrix PowerSGD compresses, a vector, a vector too small to matter; past any dense
    # start, as in a run's steady steps.
    parts = (TensorPart(0, (8, 5)), TensorPart(1, (7,)), TensorPart(2, (113,)))
    group = GroupInfo("g", compressor.steady_step, parts=parts, model_tensors=len(parts))
    grad = torch.randn(160, generator=torch.Generator().manual_seed(0))
    payload, ctx = compressor.compress(grad.clone(), group=group)
    fresh = compressor.decompress(payload, ctx)
    given = torch.full_like(grad, 7.0)  # whatever the buffer held before
    into = compressor.decompress(payload, ctx, out=given)
    assert torch.equal(into, fresh)


@pytest.mark.parametrize("name", group_options()["compressor"])
def test_a_compressor_keeps_its_own_memory_exactly_where_its_schema_says(name):
    """The schema's ``keeps_own_residual`` (config checks) and the compressor's ``OwnMemory``
    (the logged error norm) are two sides of one fact."""
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose("train", overrides=[f"compressor={name}"])
    schema = OmegaConf.to_object(cfg.compressor)
    built = build(cfg.compressor, path="compressor")
    assert getattr(schema, "keeps_own_residual", False) == isinstance(built, OwnMemory)
    if isinstance(built, OwnMemory):
        assert not built.error_feedback, "feedback=auto must not add a residual"


def test_a_kept_tensors_views_are_made_once_and_any_other_tensors_afresh():
    buffers = GroupBuffers()
    sizes, shapes = [6, 2], [torch.Size([2, 3]), torch.Size([2])]
    flat = buffers.flat(0, 8, torch.zeros(1))
    first = buffers.views(flat, sizes, shapes)
    assert [v.shape for v in first] == shapes
    assert all(v.untyped_storage().data_ptr() == flat.data_ptr() for v in first)
    assert buffers.views(flat, sizes, shapes) is first  # the same views, not new ones
    other = torch.arange(8.0)
    made = buffers.views(other, sizes, shapes)
    assert made is not buffers.views(other, sizes, shapes)  # not kept: made afresh each time
    assert torch.equal(made[0], torch.arange(6.0).view(2, 3))
    buffers.clear()
    assert buffers.views(buffers.flat(0, 8, torch.zeros(1)), sizes, shapes) is not first


def test_gradients_are_copied_into_their_views_and_a_missing_one_counts_as_zeros():
    from gradsync.schedulers.engine.components import copy_gradients

    params = [torch.nn.Parameter(torch.zeros(2, 3)), torch.nn.Parameter(torch.zeros(2))]
    params[0].grad = torch.arange(6.0).view(2, 3)
    into = [torch.full((2, 3), 9.0), torch.full((2,), 9.0)]
    copy_gradients(params, into)
    assert torch.equal(into[0], params[0].grad) and torch.equal(into[1], torch.zeros(2))
    params[1].grad = torch.ones(2)
    copy_gradients(params, into)
    assert torch.equal(into[1], torch.ones(2))
