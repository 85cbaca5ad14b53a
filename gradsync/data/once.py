"""A dataset that may be downloaded, loaded by every rank of a job with one download.

Rank 0 loads first (downloading what is missing) while every other rank waits; then the first
rank of each other node, which finds rank 0's files on a shared filesystem (loading is then a
check that they are there) or downloads its own copy into a node-local directory; then the
rest of each node, which finds its node's copy. No two ranks ever write the same files.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def load_in_turn(
    load: Callable[[], T], *, rank: int, local_rank: int, barrier: Callable[[], object]
) -> T:
    """``load()`` on every rank, in the three turns above; every rank calls ``barrier`` twice."""
    turn = 0 if rank == 0 else 1 if local_rank == 0 else 2
    loaded: T | None = None
    for current in range(3):
        if current == turn:
            loaded = load()
        if current < 2:
            barrier()
    assert loaded is not None
    return loaded
