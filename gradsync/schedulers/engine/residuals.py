"""Error-feedback residuals kept per bucket (element ranges of the gradient flattened in
backward order, ``Buckets``), carried over when a scheduler changes its buckets: the residual
of every element stays that element's, whichever bucket it now belongs to."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gradsync.schedulers.engine.buckets import Buckets
from gradsync.types import ErrorFeedback


def bucket_name(bucket: int) -> str:
    return f"bucket{bucket}"


def rebucket_residuals(
    feedback: ErrorFeedback,
    old: Buckets,
    new: Buckets,
    *,
    like: torch.Tensor,
    name: Callable[[int], str] = bucket_name,
) -> None:
    """Residuals named ``name(b)`` for ``old``'s buckets become ``new``'s; a bucket with no
    residual yet counts as zeros of ``like``'s dtype, on its device."""
    state = feedback.state_dict()
    if not state:
        return
    flat = torch.cat(
        [
            state.get(
                name(b), torch.zeros(old.numel(b), dtype=like.dtype, device=like.device)
            ).reshape(-1)
            for b in range(len(old))
        ]
    )
    feedback.load_state_dict({name(b): flat[new.slice(b)].clone() for b in range(len(new))})
