"""``dataset=synthetic``: deterministic random data for throughput benchmarks (not learnable).

Each item is drawn from its own generator seeded by (seed, split, index), so any worker reads
the same item for the same index and nothing is held in memory.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from gradsync.data.spec import DataSpec, DataSplits


def _generator(seed: int, split: int, index: int) -> np.random.Generator:
    # numpy's SeedSequence mixes the whole tuple; torch generators keep only 32 seed bits, so
    # packing (seed, split, index) into one torch seed would repeat items across splits.
    return np.random.default_rng((seed, split, index))


class RandomImages(Dataset):
    """``(x, y)``: x standard-normal float C×H×W, y uniform in [0, num_classes)."""

    def __init__(
        self, *, size: int, shape: tuple[int, ...], num_classes: int, seed: int, split: int
    ) -> None:
        self.size, self.shape, self.num_classes = size, shape, num_classes
        self.seed, self.split = seed, split

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        rng = _generator(self.seed, self.split, index)
        x = torch.from_numpy(rng.standard_normal(self.shape, dtype=np.float32))
        return x, int(rng.integers(self.num_classes))


class RandomTokens(Dataset):
    """``(inputs, targets)``: uniform token ids of length seq_len, targets shifted by one."""

    def __init__(self, *, size: int, seq_len: int, vocab_size: int, seed: int, split: int) -> None:
        self.size, self.seq_len, self.vocab_size = size, seq_len, vocab_size
        self.seed, self.split = seed, split

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        rng = _generator(self.seed, self.split, index)
        tokens = torch.from_numpy(
            rng.integers(self.vocab_size, size=self.seq_len + 1, dtype=np.int64)
        )
        return tokens[:-1], tokens[1:]


class Synthetic:
    def __init__(
        self,
        *,
        kind: str = "images",
        num_samples: int = 50_000,
        num_test_samples: int = 1_000,
        image_shape: list[int] | tuple[int, ...] = (3, 32, 32),
        num_classes: int = 10,
        seq_len: int = 128,
        vocab_size: int = 10_000,
        seed: int = 0,
    ) -> None:
        if kind not in ("images", "tokens"):
            raise ValueError(f"dataset.kind must be images or tokens, got {kind!r}")
        self.kind = kind
        self.sizes = (num_samples, num_test_samples)
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
        spec = self.known_spec()
        train: Dataset
        test: Dataset
        if self.kind == "images":
            train, test = (
                RandomImages(
                    size=size,
                    shape=self.image_shape,
                    num_classes=self.num_classes,
                    seed=self.seed,
                    split=split,
                )
                for split, size in enumerate(self.sizes)
            )
        else:
            train, test = (
                RandomTokens(
                    size=size,
                    seq_len=self.seq_len,
                    vocab_size=self.vocab_size,
                    seed=self.seed,
                    split=split,
                )
                for split, size in enumerate(self.sizes)
            )
        return DataSplits(spec=spec, train=train, test=test)
