"""One worker's batches of loaded splits, as the training loop gets them (``make_feeds``)."""

from __future__ import annotations

import torch

from gradsync.data.feeds import Feeds, make_feeds
from gradsync.data.spec import DataSplits

CPU = torch.device("cpu")


def feeds_of(
    data: DataSplits,
    *,
    batch: int,
    eval_batch: int | None = None,
    device: torch.device = CPU,
    rank: int = 0,
    workers: int = 1,
    seed: int = 0,
    loader_workers: int = 0,
) -> Feeds:
    return make_feeds(
        data,
        device=device,
        batch_size=batch,
        eval_batch_size=batch if eval_batch is None else eval_batch,
        rank=rank,
        workers=workers,
        seed=seed,
        loader_workers=loader_workers,
    )
