"""Buckets over the flat backward-ordered gradient, and per-tensor times turned into
per-bucket ones."""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn

from gradsync.schedulers.engine.buckets import Buckets, ForwardTimer


@pytest.mark.parametrize("seed", range(10))
def test_partition_covers_the_gradient_in_pieces_of_at_most_the_partition_size(seed):
    rng = random.Random(seed)
    sizes = [rng.randint(1, 50) for _ in range(rng.randint(1, 12))]
    size = rng.randint(1, 60)
    buckets = Buckets.partition(sizes, size)
    assert buckets.bounds[0] == 0 and buckets.total == sum(sizes)
    assert all(buckets.numel(b) <= size for b in range(len(buckets)))
    assert all(buckets.numel(b) == size for b in range(len(buckets) - 1))  # only the last short
    overlaps = buckets.overlaps(sizes)
    assert [sum(count for _, count in parts) for parts in overlaps] == sizes
    per_bucket = [0] * len(buckets)
    for parts in overlaps:
        for bucket, count in parts:
            per_bucket[bucket] += count
    assert per_bucket == [buckets.numel(b) for b in range(len(buckets))]


def test_spread_shares_each_tensors_time_by_its_elements():
    buckets = Buckets((0, 6, 12, 18, 20))
    sizes = [3, 10, 2, 5]
    spread = buckets.spread([3.0, 10.0, 2.0, 5.0], sizes)
    assert spread == pytest.approx([6.0, 6.0, 6.0, 2.0])  # one unit per element
    assert sum(buckets.spread([1.0, 2.0, 3.0, 4.0], sizes)) == pytest.approx(10.0)


def test_refine_splits_only_what_is_too_long_for_the_window():
    buckets = Buckets((0, 10, 40, 50))
    refined = buckets.refine([1.0, 3.0, 1.0], limit=1.0)
    assert refined.bounds == (0, 10, 20, 30, 40, 50)
    assert buckets.refine([1.0, 1.0, 1.0], limit=1.0) == buckets
    assert Buckets((0, 2)).split(0, 5).bounds == (0, 1, 2)  # never below one element
    with pytest.raises(ValueError, match="rise from 0"):
        Buckets((0, 5, 5))


def test_forward_timer_gives_each_tensor_its_modules_own_share_of_the_forward_pass():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 2))
    params = [p for p in model.parameters()][::-1]
    ticks = iter(range(1000))
    timer = ForwardTimer(model, params, clock=lambda: float(next(ticks)))
    model(torch.randn(4, 256))
    seconds = timer.take(10.0)
    assert sum(seconds) == pytest.approx(10.0)
    # Each Linear took one tick of the fake clock, shared by weight and bias by size.
    big_weight, big_bias = seconds[3], seconds[2]
    assert big_weight / big_bias == pytest.approx(256 * 256 / 256)
    assert seconds[1] + seconds[0] == pytest.approx(big_weight + big_bias)
    timer.remove()
    model(torch.randn(4, 256))
    assert timer.take(1.0) == pytest.approx([1.0 * p.numel() / 66_306 for p in params])


def test_of_groups_closes_a_bucket_at_each_group_of_whole_tensors():
    sizes = [5, 3, 7, 1]
    assert Buckets.of_groups(sizes, (1, 2, 1)).bounds == (0, 5, 15, 16)
    assert Buckets.of_groups(sizes, (4,)).bounds == (0, 16)
