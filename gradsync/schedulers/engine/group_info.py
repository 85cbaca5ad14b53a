"""The model's tensors as the parts of the groups a scheduler compresses (``GroupInfo.parts``):
whole tensors, or the runs of elements that buckets cut out of them."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from gradsync.schedulers.engine.buckets import Buckets
from gradsync.types import TensorPart


def whole_parts(params: Sequence[Tensor], members: Sequence[int]) -> tuple[TensorPart, ...]:
    """``members`` (indices into ``params``, which are in backward order), as whole tensors."""
    last = len(params) - 1
    return tuple(TensorPart(index=last - i, shape=tuple(params[i].shape)) for i in members)


def bucket_parts(
    buckets: Buckets, shapes: Sequence[tuple[int, ...]], indices: Sequence[int]
) -> list[tuple[TensorPart, ...]]:
    """For each bucket of a flat gradient made of tensors of ``shapes`` (in the flat's order;
    ``indices`` their model positions), the runs of those tensors it holds, in the flat's order."""
    sizes = [TensorPart(index, shape).numel for index, shape in zip(indices, shapes, strict=True)]
    parts: list[list[TensorPart]] = [[] for _ in range(len(buckets))]
    for index, shape, overlaps in zip(indices, shapes, buckets.overlaps(sizes), strict=True):
        start = 0
        for bucket, count in overlaps:
            parts[bucket].append(TensorPart(index, shape, start, start + count))
            start += count
    return [tuple(p) for p in parts]
