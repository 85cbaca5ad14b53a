from __future__ import annotations

import pytest

from gradsync.data.sharding import ShardedBatchSampler, eval_shard


def _batches(n, *, batch, rank, world, epoch=0, skip=0):
    s = ShardedBatchSampler(n, batch_size=batch, rank=rank, world_size=world, seed=3)
    s.set_epoch(epoch, skip_batches=skip)
    return list(s)


def test_shards_are_disjoint_and_form_the_global_batch_of_one_process():
    n, world, batch = 103, 3, 4
    shards = [_batches(n, batch=batch, rank=r, world=world) for r in range(world)]
    single = _batches(n, batch=batch * world, rank=0, world=1)
    assert len(single) == n // (batch * world) == len(shards[0])
    for j, global_batch in enumerate(single):
        assert [i for r in range(world) for i in shards[r][j]] == global_batch
    seen = [i for shard in shards for b in shard for i in b]
    assert len(seen) == len(set(seen))


def test_epochs_reshuffle_and_skip_resumes_mid_epoch():
    a = _batches(64, batch=8, rank=0, world=2, epoch=0)
    assert a != _batches(64, batch=8, rank=0, world=2, epoch=1)
    assert _batches(64, batch=8, rank=0, world=2, epoch=0, skip=2) == a[2:]


def test_too_small_dataset_says_what_to_change():
    with pytest.raises(ValueError, match=r"trainer\.batch_size"):
        ShardedBatchSampler(10, batch_size=8, rank=0, world_size=2, seed=0)


def test_eval_shards_cover_everything_once():
    parts = [eval_shard(11, rank=r, world_size=3) for r in range(3)]
    assert sorted(i for p in parts for i in p) == list(range(11))
