"""Counter-based draws (``gradsync/compressors/counter_draws.py``): the hash is the 32-bit mixer
it is defined as, its draws are uniform and independent of their neighbours (in index and in
key), and they repeat for a key and differ per seed, rank, step and group."""

from __future__ import annotations

import math

import torch

from gradsync.compressors.counter_draws import MAX_INDEX, counter_uniform, draw_key

N = 1 << 20


def _mix32(x: int, multipliers: tuple[int, int]) -> int:
    """One round of the mixer in plain 32-bit arithmetic (Python ints, wrapped by hand)."""
    x ^= x >> 16
    x = (x * multipliers[0]) % 2**32
    x ^= x >> 15
    x = (x * multipliers[1]) % 2**32
    return x ^ (x >> 15)


def _reference(index: int, key: tuple[int, int]) -> float:
    multipliers = (0x21F0AAAD, 0x735A2D97)
    x = _mix32(_mix32(index ^ key[0], multipliers) ^ key[1], multipliers)
    return (x >> 8) / 2**24


def _draws(*parts: int | str, n: int = N) -> torch.Tensor:
    return counter_uniform(torch.arange(n), draw_key(*parts)).double()


def _correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.corrcoef(torch.stack([a, b]))[0, 1])


def test_the_hash_is_the_32_bit_mixer_at_every_index_it_allows():
    key = draw_key(7, 3, 11, "layer1")
    index = torch.tensor([0, 1, 2, 12345, 2**31 - 1, 2**31, MAX_INDEX - 2, MAX_INDEX - 1])
    got = counter_uniform(index, key)
    assert got.dtype == torch.float32
    assert got.tolist() == [_reference(int(i), key) for i in index]


def test_draws_are_uniform_in_steps_of_2_to_the_minus_24():
    u = _draws(0, 0, 0, "all")
    assert float(u.min()) >= 0 and float(u.max()) < 1
    assert torch.equal(u * 2**24, (u * 2**24).floor())
    # Mean and variance of U[0, 1) within 5 standard errors.
    assert abs(float(u.mean()) - 0.5) < 5 * math.sqrt(1 / 12 / N)
    assert abs(float(u.var()) - 1 / 12) < 5 * math.sqrt(1 / 180 / N)
    # 64 equal bins: chi-square (63 degrees of freedom) far below its 1e-4 tail (~115).
    counts = torch.bincount((u * 64).long(), minlength=64).double()
    chi2 = float(((counts - N / 64) ** 2 / (N / 64)).sum())
    assert chi2 < 115, chi2


def test_neighbouring_draws_are_independent():
    u = _draws(1, 0, 5, "all")
    bound = 5 / math.sqrt(N)
    assert abs(_correlation(u[:-1], u[1:])) < bound
    # Pairs of neighbours cover the unit square evenly (8 x 8 cells, 63 degrees of freedom).
    cells = (u[0::2] * 8).long() * 8 + (u[1::2] * 8).long()
    counts = torch.bincount(cells, minlength=64).double()
    expected = N / 2 / 64
    assert float(((counts - expected) ** 2 / expected).sum()) < 115


def test_neighbouring_keys_give_unrelated_draws():
    n = 1 << 16
    base = _draws(0, 0, 5, "all", n=n)
    for other in [(0, 0, 6, "all"), (0, 1, 5, "all"), (1, 0, 5, "all"), (0, 0, 5, "all2")]:
        u = _draws(*other, n=n)
        assert abs(_correlation(base, u)) < 5 / math.sqrt(n), other
        # Not the same values in another order either: of 2**24 possible values, two
        # independent sets of 65536 share about 0.4%.
        assert float(torch.isin(u, base).double().mean()) < 0.02, other


def test_draws_repeat_for_a_key_and_differ_per_seed_rank_step_and_group():
    first = _draws(3, 1, 8, "g", n=1000)
    assert torch.equal(first, _draws(3, 1, 8, "g", n=1000))
    for other in [(4, 1, 8, "g"), (3, 0, 8, "g"), (3, 1, 9, "g"), (3, 1, 8, "h")]:
        assert not torch.equal(first, _draws(*other, n=1000)), other
    keys = {
        draw_key(seed, rank, step, "g")
        for seed in range(4)
        for rank in range(4)
        for step in range(64)
    }
    assert len(keys) == 4 * 4 * 64
