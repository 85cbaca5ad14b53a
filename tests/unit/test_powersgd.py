"""``compressor=powersgd`` on one worker: which tensors it compresses, its orthogonalization,
its own error memory, and what ``gradsync simulate`` records of it. Against PyTorch's hook on
real ranks: tests/dist/test_powersgd.py."""

from __future__ import annotations

import time

import pytest
import torch

from gradsync.comm.solo import SoloCollective
from gradsync.compressors.none import NoneCompressor
from gradsync.compressors.powersgd import PowerSGDCompressor, layout_of, orthogonalize
from gradsync.feedback.none import NoneFeedback
from gradsync.measure.wire import measure_wire
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from gradsync.types import GroupInfo, OwnMemory, TensorPart

SHAPES = ((6, 3, 3, 3), (6,), (16, 96), (16,), (3, 16), (3,))


def _group(step: int) -> GroupInfo:
    parts = tuple(TensorPart(i, shape) for i, shape in enumerate(SHAPES))
    return GroupInfo("g", step, parts=parts, model_tensors=len(parts))


def _numel() -> int:
    return sum(TensorPart(0, shape).numel for shape in SHAPES)


def test_matrices_worth_it_are_compressed_in_backward_order_and_the_rest_sent_whole():
    parts = _group(0).parts
    layout = layout_of(parts, rank=2, min_compression_rate=2.0)
    # (3 + 16)·2·2 = 76 > 48: the last weight stays whole, as every bias does.
    assert [(m.rows, m.cols, m.rank) for m in layout.matrices] == [(16, 96, 2), (6, 27, 2)]
    assert [m.offset for m in layout.matrices] == [168, 0]
    assert [numel for _, numel in layout.uncompressed] == [6, 16, 48, 3]
    assert layout.p_numel == 16 * 2 + 6 * 2 and layout.q_numel == 96 * 2 + 27 * 2


def test_matrices_follow_the_order_gradients_became_ready_when_the_engine_knows_it():
    parts = _group(0).parts
    # The 3 × 16 weight made worth compressing, and ready before the kernel and the 16 × 96.
    layout = layout_of(parts, rank=1, min_compression_rate=1.0, ready=(5, 4, 3, 0, 1, 2))
    assert [(m.rows, m.cols) for m in layout.matrices] == [(3, 16), (6, 27), (16, 96)]
    assert [numel for _, numel in layout.uncompressed] == [6, 16, 3]  # still in flat order


def test_the_engine_tells_each_group_the_order_its_gradients_became_ready():
    """A model that declares its output layer first: the engine's groups list their tensors in
    model order, and ``GroupInfo.ready`` says the output layer's came first, as hooks saw."""
    seen: list[GroupInfo] = []

    class Recording(NoneCompressor):
        def compress(self, grad, *, group):
            seen.append(group)
            return super().compress(grad, group=group)

    class HeadFirst(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = torch.nn.Linear(4, 2)
            self.body = torch.nn.Linear(3, 4)

        def forward(self, x):
            return self.head(torch.tanh(self.body(x)))

    model = HeadFirst()
    sync = AllreduceSync(
        compressor=Recording(),
        feedback=NoneFeedback(),
        collective=SoloCollective(),
        clock=time.perf_counter,
    )
    sync.attach(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for step in range(2):
        sync.begin(step=step)
        model(torch.randn(5, 3)).sum().backward()
        sync.step(step=step)
    first, second = seen
    assert [p.index for p in first.parts] == [0, 1, 2, 3]  # head.weight, head.bias, body...
    ready = [first.parts[i].index for i in first.ready]
    assert set(ready[:2]) == {0, 1} and set(ready[2:]) == {2, 3}  # the head's first
    assert second.ready == first.ready


@pytest.mark.parametrize("rank", [1, 2, 3, 5])
def test_orthogonalized_columns_are_orthonormal_and_span_the_same_space(rank):
    matrix = torch.randn(1, 20, rank, generator=torch.Generator().manual_seed(rank))
    original = matrix.clone()
    orthogonalize(matrix)
    gram = matrix[0].T @ matrix[0]
    torch.testing.assert_close(gram, torch.eye(rank), atol=1e-5, rtol=0)
    # Each original column is a combination of the new ones.
    projected = matrix[0] @ (matrix[0].T @ original[0])
    torch.testing.assert_close(projected, original[0], atol=1e-4, rtol=0)


def test_dense_until_start_step_then_the_rank_r_approximation_with_its_own_memory():
    compressor = PowerSGDCompressor(rank=1, start_step=2, seed=0)
    assert isinstance(compressor, OwnMemory)
    grad = torch.randn(_numel(), generator=torch.Generator().manual_seed(0))
    payload, ctx = compressor.compress(grad.clone(), group=_group(1))
    assert torch.equal(compressor.decompress(payload, ctx), grad)  # one worker: sum is itself
    assert float(compressor.memory_norm()) == 0.0
    payload, ctx = compressor.compress(grad.clone(), group=_group(2))
    (sent,) = payload  # the biases, then Q of the three weights (their P went before)
    assert sent.numel() == 6 + 16 + 3 + 96 + 27 + 16
    approximation = compressor.decompress(payload, ctx)
    # The memory is what the approximation left out: the next step's gradient gets it back.
    left_out = grad - approximation
    assert float(compressor.memory_norm()) == pytest.approx(float(left_out.norm()), rel=1e-6)
    biases = [slice(162, 168), slice(1704, 1720), slice(1768, 1771)]
    for part in biases:  # sent whole: nothing left out
        assert torch.equal(approximation[part], grad[part])
    state = compressor.state_dict()
    assert set(state) == {"errors", "mean_q", "parts", "seeds"}


def test_simulate_records_its_two_all_reduces_of_p_and_of_q_with_the_whole_tensors():
    compressor = PowerSGDCompressor(rank=1, start_step=10, seed=0)
    gradient = torch.randn(_numel(), generator=torch.Generator().manual_seed(1))
    wire = measure_wire("powersgd", compressor, NoneFeedback(), gradient, SHAPES, workers=4)
    kinds = [kind for kind, _ in wire.calls]
    assert kinds == ["all_reduce", "all_reduce"]  # P inside compress, then Q as the payload
    p_bytes, q_bytes = (rate * wire.numel for _, rate in wire.calls)
    assert p_bytes == pytest.approx(4 * (16 + 6 + 3))
    assert q_bytes == pytest.approx(4 * (6 + 16 + 3 + 96 + 27 + 16))


def test_a_group_given_other_tensors_starts_its_memory_afresh():
    # The same name and size, other tensors (a scheduler re-planned its groups): the memory of
    # the old tensors must not be added to the new ones.
    compressor = PowerSGDCompressor(rank=1, start_step=0, seed=0)
    before = (TensorPart(0, (8, 5)), TensorPart(1, (7,)))
    after = (TensorPart(0, (7,)), TensorPart(1, (8, 5)))
    grad = torch.randn(47, generator=torch.Generator().manual_seed(2))
    for parts in (before, after):
        group = GroupInfo("g", 0, parts=parts, model_tensors=2)
        payload, ctx = compressor.compress(grad.clone(), group=group)
        approximation = compressor.decompress(payload, ctx)
    assert float(compressor.memory_norm()) == pytest.approx(float((grad - approximation).norm()))
