"""What ``tests/gpu/test_data_path.py`` checks, with the CPU as the device where its logic
allows: each case composes, loads and gives the same batches from every build of its feeds
(held in memory, or read by loader processes); and the prefetcher's order, through
``one_ahead`` with plain functions standing for the copy on the side stream and the compute
stream's wait: batch k+1 is taken from the loader and its copy issued before batch k is
handed over."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from gradsync.data.prefetch import on_device, one_ahead
from tests.helpers.feeds import CPU, assert_same_batches, case_feeds, load_case


@pytest.mark.parametrize("option", ["cifar10", "synthetic"])
def test_in_memory_batches_are_the_same_from_every_build_of_the_feeds(option, tmp_path):
    data = load_case(option, tmp_path)
    feeds, again = case_feeds(data, CPU), case_feeds(data, CPU)
    assert feeds.in_memory
    batches = feeds.train.epoch(1, skip=0)
    first = next(batches)
    assert_same_batches([first, *batches], list(again.train.epoch(1, skip=0)), CPU)
    assert_same_batches(list(feeds.evaluation), list(again.evaluation), CPU)


def test_loader_processes_feed_what_the_training_process_reads(tmp_path):
    data = load_case("imagenet", tmp_path)
    loaders, here = case_feeds(data, CPU, loader_workers=2), case_feeds(data, CPU)
    assert not loaders.in_memory
    assert_same_batches(
        list(loaders.train.epoch(0, skip=0)), list(here.train.epoch(0, skip=0)), CPU
    )
    assert_same_batches(list(loaders.evaluation), list(here.evaluation), CPU)


def _recorded(count: int) -> tuple[list[str], Iterator[int]]:
    """``one_ahead`` over ``count`` batches, every call written down in order."""
    log: list[str] = []

    def loader() -> Iterator[int]:
        for k in range(count):
            log.append(f"asked {k}")
            yield k

    def copy(k: int) -> int:
        log.append(f"copied {k}")
        return k

    def wait(k: int) -> int:
        log.append(f"waited {k}")
        return k

    return log, one_ahead(loader(), copy, wait)


def test_the_next_batch_is_copied_before_a_batch_is_handed_over():
    log, batches = _recorded(3)
    for k in batches:
        log.append(f"handed {k}")
    assert log == [
        "asked 0",
        "copied 0",
        "asked 1",
        "copied 1",  # in flight while step 0 computes
        "waited 0",  # for batch 0's copy only
        "handed 0",
        "asked 2",
        "copied 2",
        "waited 1",
        "handed 1",
        "waited 2",  # the last: nothing left to take
        "handed 2",
    ]


def test_handing_the_first_batch_over_takes_the_second_from_the_loader():
    log, batches = _recorded(4)
    assert next(batches) == 0
    assert log == ["asked 0", "copied 0", "asked 1", "copied 1", "waited 0"]


@pytest.mark.parametrize("count", [0, 1])
def test_a_loader_of_at_most_one_batch_is_handed_over_whole(count):
    log, batches = _recorded(count)
    assert list(batches) == list(range(count))
    assert log == [f"{call} 0" for call in ("asked", "copied", "waited")][: 3 * count]


def test_on_the_cpu_the_loaders_batches_pass_through_as_they_are_asked_for():
    host = [(torch.full((2, 3), float(k)), torch.tensor([k, k])) for k in range(3)]
    asked: list[int] = []

    def loader() -> Iterator[tuple[torch.Tensor, ...]]:
        for k, batch in enumerate(host):
            asked.append(k)
            yield batch

    batches = on_device(loader(), CPU)
    first = next(batches)
    assert asked == [0]  # nothing to copy: nothing read ahead
    assert all(a is b for a, b in zip(first, host[0], strict=True))
    assert_same_batches([first, *batches], host, CPU)
