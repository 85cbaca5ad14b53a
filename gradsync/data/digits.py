"""``dataset=digits``: scikit-learn's bundled 8x8 handwritten digits (1,797 real images).

It ships inside scikit-learn, so it needs no download: the embedded default job and the tests
train on real data anywhere. The file is read directly: importing ``sklearn.datasets`` costs
every worker process about two seconds of CPU (it pulls in scipy), more than a short run
trains for.

Both splits are held in memory (``memory.py``) as float32, already standardized: the whole
set is 0.4 MB, so storing it as uint8 would save nothing worth a per-batch conversion.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch

from gradsync.data.memory import TensorSplit
from gradsync.data.options import DigitsConfig
from gradsync.data.spec import DataSpec, DataSplits


class Digits:
    def __init__(
        self,
        *,
        test_fraction: float = DigitsConfig.test_fraction,
        split_seed: int = DigitsConfig.split_seed,
    ) -> None:
        self.test_fraction = test_fraction
        self.split_seed = split_seed

    def known_spec(self) -> DataSpec:
        return DataSpec(task="classification", num_classes=10, input_shape=(1, 8, 8))

    def load(self) -> DataSplits:
        table = _digits_table()
        images = torch.tensor(table[:, :-1], dtype=torch.float32).view(-1, 1, 8, 8) / 16.0
        labels = torch.tensor(table[:, -1], dtype=torch.int64)
        # A fixed permutation, identical on every worker, decides the train/test split.
        gen = torch.Generator().manual_seed(self.split_seed)
        order = torch.randperm(len(labels), generator=gen)
        num_test = round(self.test_fraction * len(labels))
        test_idx, train_idx = order[:num_test], order[num_test:]
        mean, std = images[train_idx].mean(), images[train_idx].std()
        images = (images - mean) / std
        return DataSplits(
            spec=self.known_spec(),
            train=TensorSplit(images[train_idx], labels[train_idx]),
            test=TensorSplit(images[test_idx], labels[test_idx]),
        )


def _digits_table() -> np.ndarray:
    """scikit-learn's ``digits.csv.gz``: one row per image, 64 pixels (0-16) then the label."""
    spec = importlib.util.find_spec("sklearn")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("dataset=digits needs scikit-learn: pip install scikit-learn")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"dataset=digits: scikit-learn has no {path.name} at {path}")
    with gzip.open(path, "rt", encoding="utf-8") as file:
        return np.loadtxt(file, delimiter=",")
