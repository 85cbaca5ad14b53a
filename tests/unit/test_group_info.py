"""What a compressor is told about its group (``GroupInfo``), and TernGrad's float decisions
taken from it: the classifier's tensors and the float epochs, however the model is grouped."""

from __future__ import annotations

import pytest
import torch

from gradsync.compressors.terngrad import TernGradCompressor
from gradsync.schedulers.engine.buckets import Buckets
from gradsync.schedulers.engine.group_info import bucket_parts, whole_parts
from gradsync.types import GroupInfo, TensorPart

SHAPES = [(8, 6), (8,), (3, 8), (3,)]  # a two-layer model, model order
SIZES = [48, 8, 24, 3]


def _floats(compressor: TernGradCompressor, group: GroupInfo) -> list[int]:
    """Element counts of the group's parts that travelled as floats."""
    grad = torch.randn(sum(group.sizes or [1]))
    _, ctx = compressor.compress(grad, group=group)
    return ctx.sizes[ctx.quantized :]


def _whole(indices: list[int], *, epoch: int = 0) -> GroupInfo:
    parts = tuple(TensorPart(i, SHAPES[i]) for i in indices)
    return GroupInfo("g", 0, epoch, parts, model_tensors=len(SHAPES))


def test_whole_tensors_give_shapes_sizes_and_place():
    group = _whole([1, 2])
    assert group.shapes == [(8,), (3, 8)]
    assert group.sizes == [8, 24]
    assert group.tensors_after == 1  # the classifier's bias comes after it


def test_engine_groups_are_whole_tensors_in_model_order():
    params = [torch.zeros(s) for s in SHAPES][::-1]  # the engine keeps backward order
    parts = whole_parts(params, [2, 1])  # backward indices of the model's tensors 1 and 2
    assert [(p.index, p.shape) for p in parts] == [(1, (8,)), (2, (3, 8))]


def test_a_bucket_that_cuts_through_tensors_has_runs_but_no_shapes():
    buckets = Buckets((0, 30, 60, 83))  # element ranges of the model-order flat gradient
    groups = bucket_parts(buckets, SHAPES, range(len(SHAPES)))
    assert [[(p.index, p.start, p.stop) for p in g] for g in groups] == [
        [(0, 0, 30)],
        [(0, 30, 48), (1, 0, 8), (2, 0, 4)],
        [(2, 4, 24), (3, 0, 3)],
    ]
    cut = GroupInfo("b1", 0, parts=groups[1], model_tensors=4)
    assert cut.sizes == [18, 8, 4] and cut.shapes is None
    assert cut.tensors_after == 1
    assert GroupInfo("b2", 0, parts=groups[2], model_tensors=4).tensors_after == 0


def test_a_group_with_no_parts_is_one_tensor_at_the_model_end():
    group = GroupInfo("bucket0", 0)
    assert group.sizes is None and group.shapes is None and group.tensors_after == 0


@pytest.mark.parametrize(
    ("indices", "expected"),
    [
        ([0, 1, 2, 3], [24, 3]),  # the whole model: the classifier's weight and bias
        ([2, 3], [24, 3]),
        ([3], [3]),
        ([0, 1, 2], [24]),  # the bias is in another group
        ([0, 1], []),
    ],
)
def test_terngrad_keeps_the_classifier_float_from_the_group_place(indices, expected):
    assert _floats(TernGradCompressor(), _whole(indices)) == expected
    assert _floats(TernGradCompressor(quantize_last=True), _whole(indices)) == []


def test_terngrad_keeps_the_classifier_runs_of_cut_buckets_float():
    groups = bucket_parts(Buckets((0, 30, 60, 83)), SHAPES, range(len(SHAPES)))
    floats = [
        _floats(TernGradCompressor(), GroupInfo(f"b{b}", 0, parts=parts, model_tensors=4))
        for b, parts in enumerate(groups)
    ]
    assert floats == [[], [4], [20, 3]]


def test_terngrad_float_epochs_send_every_group_in_float():
    compressor = TernGradCompressor(float_every_epochs=2)
    for epoch in range(4):
        floats = _floats(compressor, _whole([0, 1], epoch=epoch))
        assert floats == ([48, 8] if epoch in (1, 3) else [])


def test_sizes_that_do_not_add_up_are_refused():
    with pytest.raises(ValueError, match="sizes add up to 3"):
        TernGradCompressor().compress(torch.zeros(5), group=_whole([3]))
