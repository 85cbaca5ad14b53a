"""``dataset=digits``: scikit-learn's bundled 8x8 handwritten digits (1,797 real images).

It ships inside scikit-learn, so it needs no download: the embedded default job and the tests
train on real data anywhere.
"""

from __future__ import annotations

import torch
from sklearn.datasets import load_digits
from torch.utils.data import TensorDataset

from gradsync.data.spec import DataSpec, DataSplits


class Digits:
    def __init__(self, *, test_fraction: float = 0.2, split_seed: int = 0) -> None:
        self.test_fraction = test_fraction
        self.split_seed = split_seed

    def load(self) -> DataSplits:
        bunch = load_digits()
        images = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
        labels = torch.tensor(bunch.target, dtype=torch.int64)
        # A fixed permutation, identical on every worker, decides the train/test split.
        gen = torch.Generator().manual_seed(self.split_seed)
        order = torch.randperm(len(labels), generator=gen)
        num_test = round(self.test_fraction * len(labels))
        test_idx, train_idx = order[:num_test], order[num_test:]
        mean, std = images[train_idx].mean(), images[train_idx].std()
        images = (images - mean) / std
        return DataSplits(
            spec=DataSpec(task="classification", num_classes=10, input_shape=(1, 8, 8)),
            train=TensorDataset(images[train_idx], labels[train_idx]),
            test=TensorDataset(images[test_idx], labels[test_idx]),
        )
