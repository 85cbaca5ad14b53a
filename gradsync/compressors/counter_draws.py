"""Uniform draws computed, not generated: each element's draw is a hash of its index and a key.

A generator fills a buffer: one more kernel and one more pass over memory before the quantizer
reads it. A counter-based draw is a pure function of (key, element index), so a fused kernel
computes it where it needs it, in registers, and any device gives the same draws for the same
key. The key is per call (``draw_key``: the job's seed, the worker's rank, the step and the
group's name), so draws differ between workers, steps and groups and repeat with the seed.

The hash is two rounds of a 32-bit integer mixer (xor-shifts and odd multipliers, as in Chris
Wellons' hash-prospector), each round taking one half of the key. It works on int64 tensors
holding 32-bit values: every multiplier is below 2**31, so a product stays below 2**63 and never
overflows, and the masks keep the low 32 bits, which is what a 32-bit multiply wraps to. The top
24 bits of the result give a float32 in [0, 1) in steps of 2**-24, exactly representable.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradsync.compressors.seeding import mixed_seed

LOW_32 = 0xFFFFFFFF
MAX_INDEX = 1 << 32
"""Elements a call may draw for: indices are hashed as 32-bit values."""
_MULTIPLIERS = (0x21F0AAAD, 0x735A2D97)
"""Odd and below 2**31 (products of 32-bit values stay below 2**63)."""
DrawKey = tuple[int, int]
"""Two 32-bit halves, one per round of the hash."""


def draw_key(*parts: int | str) -> DrawKey:
    """The key of one call's draws: ``mixed_seed(*parts)`` through SplitMix64's finalizer, so
    that keys of nearby parts (step t and t + 1) share no bits, then cut into two halves."""
    z = mixed_seed(*parts)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    z ^= z >> 31
    return z & LOW_32, z >> 32


def _mix(x: Tensor) -> Tensor:
    """One round of the 32-bit mixer on the 32-bit values of an int64 tensor (a bijection)."""
    x = x ^ (x >> 16)
    x = (x * _MULTIPLIERS[0]) & LOW_32
    x = x ^ (x >> 15)
    x = (x * _MULTIPLIERS[1]) & LOW_32
    return x ^ (x >> 15)


def counter_bits(index: Tensor, key: DrawKey) -> Tensor:
    """32 random bits (as int64 values in [0, 2**32)), one per element of ``index`` (int64 in
    [0, ``MAX_INDEX``)). For one key, a bijection of the index: distinct indices never share a
    value."""
    return _mix(_mix(index ^ key[0]) ^ key[1])


def counter_uniform(index: Tensor, key: DrawKey) -> Tensor:
    """float32 draws in [0, 1), one per element of ``index`` (int64 in [0, ``MAX_INDEX``))."""
    return (counter_bits(index, key) >> 8).to(torch.float32) * 2.0**-24


def counter_integers(index: Tensor, key: DrawKey, n: int) -> Tensor:
    """int64 draws in [0, n), one per element of ``index`` (n < 2**31, so the product below
    stays under 2**63): the bits scaled by n (a bias below n / 2**32 per value)."""
    if not 0 < n < 1 << 31:
        raise ValueError(f"counter_integers draws below n in [1, 2**31), got n = {n}")
    return (counter_bits(index, key) * n) >> 32
