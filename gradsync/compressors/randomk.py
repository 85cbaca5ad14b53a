"""``compressor=randomk``: k random elements, the same on every worker, so values all-reduce.

Indices are drawn on the gradient's device from a key made of (seed, step, group name), never
of the worker's rank: every worker draws the same set without communicating. The draws are
counter-based (``counter_draws``), a pure function of the key and the draw's number, so every
device draws the same numbers: a generator's CUDA draws depend on the GPU's number of
multiprocessors, and workers on two GPU models would select different sets. Nothing is read on
the host, and nothing is copied to the device.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor
from typing_extensions import Unpack

from gradsync.compressors.counter_draws import DrawKey, counter_bits, counter_integers, draw_key
from gradsync.compressors.fused import fused
from gradsync.compressors.sparse import AgreedIndexCompressor
from gradsync.compressors.warmup import WarmupArgs

SHORT_LOG2 = -80.0
"""Draws are sized so that fewer than k distinct values come up with probability below 2^-80 a
draw (below one in 10^12 after 10^12 draws)."""


class RandomKCompressor(AgreedIndexCompressor):
    def __init__(self, *, density: float, seed: int = 0, **warmup: Unpack[WarmupArgs]) -> None:
        super().__init__(density=density, **warmup)
        self.seed = seed

    def agree(self, flat: Tensor, *, name: str, step: int, sizes: list[int], k: int) -> Tensor:
        return random_subset(flat.numel(), k, draw_key(self.seed, step, name), flat.device)


def random_subset(n: int, k: int, key: DrawKey, device: torch.device) -> Tensor:
    """k distinct indices (int64) in [0, n), uniformly among all k-subsets, drawn on ``gen``'s
    device in a fixed number of kernels, without a full permutation's O(n) where k is small.

    m values are drawn with replacement and the first k distinct ones, in the order they came
    up, are kept (``first_distinct``). Any relabelling of [0, n) leaves independent uniform
    draws as likely as before, and maps the first k distinct values of the draws to those of
    the relabelled draws: so every ordered k-tuple of distinct values is equally likely, and
    every k-subset too. ``draws_for`` sizes m so that fewer than k distinct values are
    astronomically unlikely. Where that takes about n draws, the k indices of smallest hash
    (``counter_bits``, a bijection: no two indices tie) are taken, a random k-subset too.
    """
    m = draws_for(n, k)
    if m >= n:
        bits = _hashes(torch.arange(n, device=device), key)
        return torch.topk(bits, k, largest=False, sorted=False).indices
    return first_distinct(_integers_below(torch.arange(m, device=device), key, n), k)


# The hashes in one kernel each on a GPU (a dozen integer operations eagerly).
_hashes = fused(counter_bits)
_integers_below = fused(counter_integers)


def first_distinct(draws: Tensor, k: int) -> Tensor:
    """The first ``k`` distinct values of ``draws``, in no particular order; with fewer than
    ``k`` distinct values (which ``draws_for`` makes astronomically unlikely), some repeat.

    A stable sort puts each value's draws together, earliest first; a value's first draw is
    the one whose sorted neighbour before it differs. The k earliest first draws are kept."""
    values, order = torch.sort(draws, stable=True)
    repeated = values[1:] == values[:-1]
    # Where each value first came up; a repeat, as late as the last draw, is taken last.
    order[1:].masked_fill_(repeated, draws.numel() - 1)
    earliest = torch.topk(order, k, largest=False, sorted=False).values
    return draws[earliest]


@functools.lru_cache(maxsize=256)
def draws_for(n: int, k: int) -> int:
    """How many draws with replacement from n values give k distinct ones, but with probability
    below 2^``SHORT_LOG2``; at least n where that takes about n or more.

    Before k distinct values are in hand, a draw repeats one with probability at most
    q = (k - 1)/n, so m draws fall short only if more than m - k of them repeat, which is at
    most as likely as more than m - k successes in m trials of probability q:
    P(Bin(m, q) >= t) <= exp(-mq) (e·mq/t)^t for t = m - k + 1 > mq (Chernoff)."""
    if k <= 1 or k >= n:
        return k if k <= 1 else n
    q, limit = (k - 1) / n, SHORT_LOG2 * math.log(2)

    def enough(m: int) -> bool:
        mean, t = m * q, m - k + 1
        return t > mean and -mean + t * (1 + math.log(mean / t)) <= limit

    high = k + 1
    while not enough(high):
        if high >= n:
            return n
        high = k + 2 * (high - k)
    low = k  # not enough: k draws hold k distinct values only if no repeat at all
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return min(high, n)
