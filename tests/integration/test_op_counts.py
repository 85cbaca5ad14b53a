"""The operation counter (``benchmarks.op_counts``) and what it holds every compressor to, on
the code path a GPU takes: no host synchronization outside a declared point, and a number of
operations that does not grow with the number of tensors (PowerSGD's may grow with the number
of distinct matrix shapes, not of tensors). Small layouts stand in for ResNet-18's and
ResNet-50's gradients, which the benchmark counts."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from benchmarks.gpu_kernels import bound_compressor, roundtrip
from benchmarks.op_counts import AT_MOST, GROWS_WITH_SHAPES, Counts, count
from gradsync.comm.host_sync import host_sync
from gradsync.compressors.code_paths import gpu_branches
from gradsync.compressors.fused import fused
from gradsync.compressors.registry import COMPRESSORS
from gradsync.types import GroupInfo, TensorPart

SHAPES = [(16, 3, 3, 3), (16,), (16,), (32, 16, 3, 3), (32,), (32,), (64, 32, 1, 1), (64,)]
SHAPES += [(10, 64), (10,), (48, 32, 3, 3), (48,)]
"""A small convolutional network's tensors: weights, batch-norm pairs, a classifier."""
OTHER = [(8, 8, 5, 5), (8,), (24, 8, 3, 3), (24,), (24,), (96, 24), (96,), (7, 96), (7,)]
"""Other sizes and shapes altogether."""


def _group(shapes: list[tuple[int, ...]]) -> GroupInfo:
    parts = tuple(TensorPart(i, shape) for i, shape in enumerate(shapes))
    return GroupInfo("all", 0, 0, parts=parts, model_tensors=len(parts))


def _gradient(group: GroupInfo) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    # Tensors of different scales, as a real gradient's layers are.
    pieces = [
        torch.randn(p.numel, generator=gen) * 10.0 ** (i % 3 - 1) for i, p in enumerate(group.parts)
    ]
    return torch.cat(pieces)


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    store = tmp_path_factory.mktemp("store") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _counted(option: str, shapes: list[tuple[int, ...]]) -> Counts:
    group = _group(shapes)
    call = roundtrip(bound_compressor(option, torch.device("cpu")), _gradient(group), group)
    call()  # made once per group: layouts, buffers, compiled kernels
    return count(call)


# ---- the counter ---------------------------------------------------------------------------


def test_the_counter_sees_operations_and_each_kind_of_host_read():
    x = torch.randn(100)
    counts = count(lambda: (x.abs().topk(5), x.sum().item(), torch.nonzero(x > 0), x.tolist()))
    assert counts.by_op["topk"] == 1 and counts.operations >= 6
    assert dict(counts.syncs) == {"_local_scalar_dense": 1, "nonzero": 1, "tolist": 1}
    assert counts.undeclared == 3 and counts.declared == 0


def test_a_read_inside_a_declared_point_counts_as_declared():
    x = torch.randn(10)

    def declared() -> None:
        with host_sync("test.point"):
            x.tolist()
        bool(x.sum() > 0)

    counts = count(declared)
    assert counts.declared == 1 and counts.undeclared == 1


def test_a_fused_kernel_counts_as_the_kernels_inductor_made_for_it():
    @fused
    def scaled(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
        return (x.abs() * factor + 1).floor().clamp(max=4)

    x, factor = torch.randn(1000), torch.rand(1000)
    eager = count(lambda: scaled(x, factor))
    assert eager.operations == 5  # on the CPU's route: the eager reference
    with gpu_branches():
        assert torch.equal(scaled(x, factor), scaled.eager(x, factor))
        compiled = count(lambda: scaled(x, factor))
    assert compiled.operations == scaled.kernels >= 1
    assert compiled.operations < eager.operations


# ---- every compressor, along the GPU's route -------------------------------------------------


@pytest.mark.parametrize("option", list(COMPRESSORS))
def test_a_compressor_counts_the_same_whatever_its_tensors_and_waits_only_where_declared(
    option, one_rank
):
    with gpu_branches():
        few = _counted(option, SHAPES)
        repeated = _counted(option, SHAPES * 4)  # no new shape, four times the tensors
        other = _counted(option, OTHER)
    for counts in (few, repeated, other):
        assert counts.undeclared == 0, dict(counts.syncs)
    assert repeated.operations == few.operations, (few.by_op, repeated.by_op)
    if option not in GROWS_WITH_SHAPES:
        assert other.operations == few.operations, (few.by_op, other.by_op)
    if option in AT_MOST:
        assert few.operations <= AT_MOST[option], few.by_op
