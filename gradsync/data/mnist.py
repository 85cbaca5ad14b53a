"""``dataset=mnist`` / ``fashion_mnist``: torchvision's loaders on the uncompressed idx files.

They read ``<root>/MNIST/raw/`` resp. ``<root>/FashionMNIST/raw/`` (``{train,t10k}-images-idx3-
ubyte`` and ``{train,t10k}-labels-idx1-ubyte``); images are 1×28×28, normalized, not augmented.
"""

from __future__ import annotations

from typing import ClassVar

from torchvision.datasets import MNIST as TorchMNIST
from torchvision.datasets import FashionMNIST as TorchFashionMNIST

from gradsync.data import transforms
from gradsync.data.spec import DataSpec, DataSplits


class MNIST:
    loader: ClassVar[type[TorchMNIST]] = TorchMNIST
    stats: ClassVar[transforms.Stats] = transforms.MNIST_STATS

    def __init__(self, *, root: str, download: bool = False) -> None:
        self.root = root
        self.download = download

    def known_spec(self) -> DataSpec:
        return DataSpec(task="classification", num_classes=10, input_shape=(1, 28, 28))

    def load(self) -> DataSplits:
        transform = transforms.to_normalized_tensor(self.stats)
        train = self.loader(self.root, train=True, download=self.download, transform=transform)
        test = self.loader(self.root, train=False, transform=transform)
        return DataSplits(
            spec=self.known_spec(),
            train=train,
            test=test,
        )


class FashionMNIST(MNIST):
    loader: ClassVar[type[TorchMNIST]] = TorchFashionMNIST
    stats: ClassVar[transforms.Stats] = transforms.FASHION_MNIST_STATS
