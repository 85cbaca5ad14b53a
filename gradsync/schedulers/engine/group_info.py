"""The model's tensors as the parts of the groups a scheduler compresses (``GroupInfo.parts``):
whole tensors, or the runs of elements that buckets cut out of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

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


@dataclass(frozen=True)
class GroupLayout:
    """What a group of whole tensors is, worked out once per plan rather than at every step:
    its parameters in model order (the order of its flat gradient), their element counts and
    shapes, and the parts a compressor is told about."""

    name: str
    params: tuple[nn.Parameter, ...]
    sizes: tuple[int, ...]
    shapes: tuple[torch.Size, ...]
    numel: int
    parts: tuple[TensorPart, ...]

    @classmethod
    def of(cls, name: str, params: Sequence[nn.Parameter], members: Sequence[int]) -> GroupLayout:
        """``members``: indices into ``params`` (backward order), in model order."""
        chosen = tuple(params[i] for i in members)
        sizes = tuple(p.numel() for p in chosen)
        shapes = tuple(p.shape for p in chosen)
        return cls(name, chosen, sizes, shapes, sum(sizes), whole_parts(params, members))
