"""``compressor=powersgd`` works on the matrices of one shape as one batch: it must compute what
the method's definition computes one matrix at a time, on several workers, over steps that warm
start Q from the last one, at ranks 1 and 4, in float32 and float16; its memory must resume from
``state_dict`` and ``snapshot`` as it was, and keep no trace of a step never decompressed; and
its batches must gather and put back each tensor where it lies. The definition here is written
over every worker's gradient at once, one matrix after another; the compressor runs on one
thread per worker, summing through a shared table."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import nullcontext

import numpy as np
import pytest
import torch
from torch import Tensor

from gradsync.comm.solo import SoloCollective
from gradsync.compressors.code_paths import gpu_branches
from gradsync.compressors.powersgd import (
    SEED_RANGE,
    PowerSGDCompressor,
    layout_of,
    orthogonalize,
)
from gradsync.types import GroupInfo, TensorPart

PARTS = (
    TensorPart(0, (16, 4, 3, 3)),  # convolution kernels: 16 × 36 matrices, twice
    TensorPart(1, (16,)),
    TensorPart(2, (16, 4, 3, 3)),
    TensorPart(3, (16,)),
    TensorPart(4, (32, 8, 3, 3)),  # once
    TensorPart(5, (32,)),
    TensorPart(6, (24, 32)),  # three linear weights of one shape, with their biases
    TensorPart(7, (24,)),
    TensorPart(8, (24, 32)),
    TensorPart(9, (24,)),
    TensorPart(10, (24, 32)),
    TensorPart(11, (24,)),
    TensorPart(12, (5, 40)),  # compressed at rank 1 only
    TensorPart(13, (3, 16)),  # compressed at rank 1 only
    TensorPart(14, (32, 20), start=100, stop=400),  # cut by a bucket: sent as it is
)
NUMEL = sum(part.numel for part in PARTS)
WORKERS, STEPS, START, SEED = 3, 5, 1, 7


def _group(step: int) -> GroupInfo:
    return GroupInfo("g", step, parts=PARTS, model_tensors=15)


def _gradients(dtype: torch.dtype) -> list[list[Tensor]]:
    """Per step, each worker's gradient: tensors of different scales, as layers have."""
    gen = torch.Generator().manual_seed(0)
    scales = torch.cat([torch.full((p.numel,), 10.0 ** (i % 3 - 1)) for i, p in enumerate(PARTS)])
    return [
        [(torch.randn(NUMEL, generator=gen) * scales).to(dtype) for _ in range(WORKERS)]
        for _ in range(STEPS)
    ]


# ---- the definition, one matrix at a time ----------------------------------------------------
def _summed(tensors: Sequence[Tensor]) -> Tensor:
    total = tensors[0].clone()
    for tensor in tensors[1:]:
        total += tensor
    return total


def _definition(
    steps: list[list[Tensor]], *, rank: int, feedback: bool, warm: bool
) -> list[Tensor]:
    """Each step's sum over workers of their mean approximation, computed one matrix after
    another (the unbatched hook's arithmetic)."""
    layout = layout_of(PARTS, rank, 2.0)
    seeds = np.random.RandomState(SEED)
    workers = len(steps[0])
    errors: list[Tensor] | None = None
    mean_qs: list[Tensor] = []
    sums = []
    for step, grads in enumerate(steps):
        if step < START:
            sums.append(_summed(grads))
            continue
        compensated = [g + e for g, e in zip(grads, errors, strict=True)] if errors else grads
        if not mean_qs:
            gen = torch.Generator().manual_seed(int(seeds.randint(SEED_RANGE)))
            mean_qs = [
                torch.randn(1, m.cols, m.rank, generator=gen, dtype=grads[0].dtype)
                for m in layout.matrices
            ]
        mean = torch.empty_like(grads[0])
        next_qs = []
        for m, q in zip(layout.matrices, mean_qs, strict=True):
            orthogonalize(q)
            span = slice(m.offset, m.offset + m.rows * m.cols)
            matrices = [c[span].view(1, m.rows, m.cols) for c in compensated]
            p = _summed([torch.bmm(matrix, q) for matrix in matrices])
            orthogonalize(p)
            mean_q = _summed([torch.bmm(matrix.transpose(1, 2), p) for matrix in matrices])
            mean_q /= workers
            mean[span] = torch.bmm(p, mean_q.transpose(1, 2)).view(-1)
            next_qs.append(mean_q)
        for start, numel in layout.uncompressed:
            mean[start : start + numel] = _summed([c[start : start + numel] for c in compensated])
            mean[start : start + numel] /= workers
        errors = [c - mean for c in compensated] if feedback else None
        mean_qs = next_qs if warm else []
        sums.append(mean * workers)
    return sums


# ---- the compressor, one thread per worker ---------------------------------------------------
class _Table:
    """Where the workers' threads meet to sum a tensor, in worker order."""

    def __init__(self, workers: int) -> None:
        self.barrier = threading.Barrier(workers, timeout=60)
        self.deposits: list[Tensor | None] = [None] * workers


class _ThreadCollective(SoloCollective):
    def __init__(self, table: _Table, rank: int) -> None:
        self.table, self.rank, self.world_size = table, rank, len(table.deposits)

    def all_reduce(self, payload, *, op="sum"):
        for tensor in payload:
            self.table.deposits[self.rank] = tensor.clone()
            self.table.barrier.wait()
            total = _summed([d for d in self.table.deposits if d is not None])
            self.table.barrier.wait()
            tensor.copy_(total)
        return payload


def _compressed(
    steps: list[list[Tensor]], *, rank: int, feedback: bool, warm: bool
) -> list[list[Tensor]]:
    """Per worker, each step's decompressed sum from the compressor."""
    table = _Table(len(steps[0]))
    results: list[list[Tensor]] = [[] for _ in steps[0]]
    failures: list[BaseException] = []

    def worker(index: int) -> None:
        collective = _ThreadCollective(table, index)
        compressor = PowerSGDCompressor(
            rank=rank, start_step=START, use_error_feedback=feedback, warm_start=warm, seed=SEED
        )
        compressor.bind(collective)
        try:
            for step, grads in enumerate(steps):
                payload, ctx = compressor.compress(grads[index].clone(), group=_group(step))
                payload = collective.all_reduce(payload)
                results[index].append(compressor.decompress(payload, ctx).clone())
        except BaseException as failure:
            failures.append(failure)
            table.barrier.abort()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(steps[0]))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return results


CASES = [  # rank, dtype, error feedback, warm start
    (1, torch.float32, True, True),
    (4, torch.float32, True, True),  # QR
    (1, torch.float16, True, True),
    (4, torch.float16, True, True),  # Gram-Schmidt: no QR in half precision
    (2, torch.float32, False, False),
]
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3}


@pytest.mark.parametrize("route", ["gpu", "cpu"])
@pytest.mark.parametrize(
    "case", CASES, ids=[f"r{r}-{str(d)[6:]}-ef{e:d}-warm{w:d}" for r, d, e, w in CASES]
)
def test_the_batched_steps_compute_the_per_matrix_definition(case, route):
    """Along the GPU's route (one ``bmm`` per shape) and the CPU's (one per matrix)."""
    rank, dtype, feedback, warm = case
    steps = _gradients(dtype)
    expected = _definition(steps, rank=rank, feedback=feedback, warm=warm)
    with gpu_branches() if route == "gpu" else nullcontext():
        per_worker = _compressed(steps, rank=rank, feedback=feedback, warm=warm)
    for results in per_worker:
        for step, (ours, theirs) in enumerate(zip(results, expected, strict=True)):
            scale = float(theirs.float().abs().max())
            tol = TOLERANCE[dtype]
            torch.testing.assert_close(
                ours.float(), theirs.float(), rtol=tol, atol=tol * scale, msg=f"step {step}"
            )
    for results in per_worker[1:]:
        assert all(map(torch.equal, results, per_worker[0])), "every worker decompresses alike"


# ---- its memory, across a checkpoint ---------------------------------------------------------
def _run(compressor: PowerSGDCompressor, steps: range) -> list[Tensor]:
    grads = _gradients(torch.float32)
    outputs = []
    for step in steps:
        payload, ctx = compressor.compress(grads[step][0].clone(), group=_group(step))
        outputs.append(compressor.decompress(payload, ctx).clone())
    return outputs


def test_a_run_resumed_from_its_state_dict_or_snapshot_equals_the_uninterrupted_one():
    whole = _run(PowerSGDCompressor(rank=2, start_step=START, seed=SEED), range(STEPS))
    first = PowerSGDCompressor(rank=2, start_step=START, seed=SEED)
    _run(first, range(3))
    resumed = PowerSGDCompressor(rank=2, start_step=START, seed=SEED)
    resumed.load_state_dict(first.state_dict())
    assert all(map(torch.equal, _run(resumed, range(3, STEPS)), whole[3:]))
    snapshot = first.snapshot()
    _run(first, range(3, 4))
    first.restore(snapshot)
    assert all(map(torch.equal, _run(first, range(3, STEPS)), whole[3:]))


def test_the_memory_is_kept_in_the_groups_order_as_checkpoints_hold_it():
    """A checkpoint holds each group's error in its flat gradient's order and the mean Q in the
    layout's; the error is what this step's approximation left out, element by element."""
    compressor = PowerSGDCompressor(rank=1, start_step=0, seed=SEED)
    grad = _gradients(torch.float32)[0][0]
    payload, ctx = compressor.compress(grad.clone(), group=_group(0))
    approximation = compressor.decompress(payload, ctx)
    state = compressor.state_dict()
    torch.testing.assert_close(state["errors"]["g"], grad - approximation, rtol=0, atol=1e-6)
    assert state["mean_q"]["g"].numel() == layout_of(PARTS, 1, 2.0).q_numel


# ---- gathering and putting back --------------------------------------------------------------
def test_batches_gather_each_tensor_from_where_it_lies_and_put_it_back_there():
    layout = layout_of(PARTS, 1, 2.0)
    batches = layout.batches
    # Views into larger buffers, as a scheduler's group can be.
    flat = torch.randn(NUMEL + 9, generator=torch.Generator().manual_seed(3))[5:-4]
    stacked = batches.stacked(flat)
    batches.gather_matrices(flat, into=stacked)
    gathered = stacked.matrices
    # One batch per shape, in backward order: the three linear weights, the two kernels.
    shapes = [(1, 3, 16), (1, 5, 40), (3, 24, 32), (1, 32, 72), (2, 16, 36)]
    assert [tuple(m.shape) for m in gathered] == shapes
    expected = [
        flat[m.offset : m.offset + m.rows * m.cols].view(m.rows, m.cols) for m in layout.matrices
    ]
    assert all(map(torch.equal, [b for batch in gathered for b in batch], expected))
    uncompressed = flat.new_empty(layout.uncompressed_numel)
    batches.gather_uncompressed(flat, into=uncompressed)
    spans = [flat[start : start + numel] for start, numel in layout.uncompressed]
    assert torch.equal(uncompressed, torch.cat(spans))
    around = torch.full((NUMEL + 9,), float("nan"))
    rebuilt = around[4:-5]
    batches.put_matrices(stacked, rebuilt)
    batches.put_uncompressed(uncompressed, rebuilt)
    assert torch.equal(rebuilt, flat)  # every element written, each where it came from
    assert around[:4].isnan().all() and around[-5:].isnan().all()  # and nothing outside


def test_a_step_never_decompressed_leaves_no_trace_in_the_memory():
    """A step every worker skips (fp16 overflow) is compressed and never decompressed: the
    buffers the group reuses from step to step must not carry its gradient into later steps."""
    grads = _gradients(torch.float32)
    runs = []
    for skipped in (grads[3][0], grads[3][1] * 100):
        compressor = PowerSGDCompressor(rank=2, start_step=START, seed=SEED)
        _run(compressor, range(3))
        compressor.compress(skipped.clone(), group=_group(3))
        runs.append([*_run(compressor, range(4, STEPS)), compressor.state_dict()["errors"]["g"]])
    assert all(map(torch.equal, *runs))
