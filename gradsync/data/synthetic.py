"""``dataset=synthetic``: deterministic random data for throughput benchmarks (not learnable).

Each split is a pool of at most ``pool_size`` random items, drawn once per worker from a
generator seeded by (seed, split), and sample i is pool item i mod the pool's length
(``memory.PooledSplit``). The pool is drawn on the host with torch's CPU generator and then
moved to the worker's device, so every worker, on any device type, holds the same items for the
same index, and taking a batch is one gather there: no per-sample work, no host work per step.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from gradsync.data.memory import PooledSplit
from gradsync.data.options import SYNTHETIC_IMAGE_SHAPE, SyntheticConfig
from gradsync.data.spec import DataSpec, DataSplits


def _generator(seed: int, split: int) -> torch.Generator:
    # numpy's SeedSequence mixes the whole tuple into one 64-bit seed: seed*2+split-style
    # packing would make (seed, test) of one run the (seed, train) of another.
    mixed = np.random.SeedSequence((seed, split)).generate_state(1, np.uint64)[0]
    return torch.Generator().manual_seed(int(mixed))


def random_images(
    count: int, shape: tuple[int, ...], num_classes: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """``(x, y)`` pools: x standard-normal float C×H×W, y uniform in [0, num_classes)."""
    images = torch.randn((count, *shape), generator=generator)
    return images, torch.randint(num_classes, (count,), generator=generator)


def random_tokens(
    count: int, seq_len: int, vocab_size: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """``(inputs, targets)`` pools: uniform token ids of length seq_len, targets shifted by one."""
    tokens = torch.randint(vocab_size, (count, seq_len + 1), generator=generator)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


class Synthetic:
    def __init__(
        self,
        *,
        kind: str = SyntheticConfig.kind,
        num_samples: int = SyntheticConfig.num_samples,
        num_test_samples: int = SyntheticConfig.num_test_samples,
        pool_size: int = SyntheticConfig.pool_size,
        image_shape: list[int] | tuple[int, ...] = SYNTHETIC_IMAGE_SHAPE,
        num_classes: int = SyntheticConfig.num_classes,
        seq_len: int = SyntheticConfig.seq_len,
        vocab_size: int = SyntheticConfig.vocab_size,
        seed: int = SyntheticConfig.seed,
    ) -> None:
        if kind not in ("images", "tokens"):
            raise ValueError(f"dataset.kind must be images or tokens, got {kind!r}")
        self.kind = kind
        self.sizes = (num_samples, num_test_samples)
        self.pool_size = pool_size
        self.image_shape = tuple(image_shape)
        self.num_classes = num_classes
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.seed = seed

    def known_spec(self) -> DataSpec:
        if self.kind == "images":
            return DataSpec(
                task="classification", num_classes=self.num_classes, input_shape=self.image_shape
            )
        return DataSpec(task="language_model", vocab_size=self.vocab_size, seq_len=self.seq_len)

    def load(self) -> DataSplits:
        train, test = (self._split(split, size) for split, size in enumerate(self.sizes))
        return DataSplits(spec=self.known_spec(), train=train, test=test)

    def _split(self, split: int, size: int) -> PooledSplit:
        generator = _generator(self.seed, split)
        count = min(size, self.pool_size)
        if self.kind == "images":
            pool = random_images(count, self.image_shape, self.num_classes, generator)
        else:
            pool = random_tokens(count, self.seq_len, self.vocab_size, generator)
        return PooledSplit(*pool, size=size)
