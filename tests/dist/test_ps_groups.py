"""The process groups of a job with parameter servers, on real ranks: two workers and a server."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from gradsync.schedulers.ps.groups import background, make_groups
from tests.helpers.dist import run_world

pytestmark = pytest.mark.dist

WORKERS = 2


def _groups(rank: int, world_size: int) -> dict[str, object]:
    workers = make_groups(WORKERS, timedelta(seconds=60))
    total = torch.ones(1)
    if workers is not None:
        dist.all_reduce(total, group=workers)
    everyone = torch.ones(1)
    dist.all_reduce(everyone, group=background().group)
    made = None if workers is None else "group"
    return {"workers": made, "sum": total.item(), "everyone": everyone.item()}


def test_workers_share_a_group_the_server_is_not_handed(tmp_path):
    ranks = run_world(_groups, WORKERS + 1, tmp_path)
    assert [r["workers"] for r in ranks] == ["group", "group", None]
    assert [r["sum"] for r in ranks] == [WORKERS, WORKERS, 1.0]  # summed among the workers only
    assert [r["everyone"] for r in ranks] == [WORKERS + 1] * (WORKERS + 1)
