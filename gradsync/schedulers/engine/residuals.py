"""Error-feedback residuals kept per bucket (element ranges of the gradient flattened in
backward order, ``Buckets``), carried over when a scheduler changes its buckets: the residual
of every element stays that element's, whichever bucket it now belongs to."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from gradsync.schedulers.engine.buckets import Buckets
from gradsync.types import ErrorFeedback


def bucket_name(bucket: int) -> str:
    return f"bucket{bucket}"


def rebucket_residuals(
    feedback: ErrorFeedback,
    old: Buckets,
    new: Buckets,
    *,
    like: Tensor,
    name: Callable[[int], str] = bucket_name,
) -> None:
    """Residuals named ``name(b)`` for ``old``'s buckets become ``new``'s, cut anew where
    ``like`` (the model) lives, never through the host; a bucket with no residual yet counts
    as zeros."""
    residuals = feedback.residuals()
    if not residuals:
        return
    flat = torch.cat(
        [flat_residual(residuals, name(b), old.numel(b), like=like) for b in range(len(old))]
    )
    feedback.replace_residuals({name(b): flat[new.slice(b)].clone() for b in range(len(new))})


def flat_residual(
    residuals: Mapping[str, Tensor], name: str, numel: int, *, like: Tensor
) -> Tensor:
    """The residual ``name`` flat on ``like``'s device (moved there when it was restored from a
    checkpoint on the host), or ``numel`` zeros of ``like``'s dtype when it has none yet."""
    residual = residuals.get(name)
    if residual is None:
        return torch.zeros(numel, dtype=like.dtype, device=like.device)
    return residual.reshape(-1).to(like.device)
