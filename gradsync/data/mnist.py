"""``dataset=mnist`` / ``fashion_mnist``: torchvision's loaders on the uncompressed idx files.

They read ``<root>/MNIST/raw/`` resp. ``<root>/FashionMNIST/raw/`` (``{train,t10k}-images-idx3-
ubyte`` and ``{train,t10k}-labels-idx1-ubyte``); images are 1×28×28, normalized, not augmented.
Each split is held in memory as one uint8 tensor and normalized a batch at a time
(``memory.py``).
"""

from __future__ import annotations

from typing import ClassVar

from torchvision.datasets import MNIST as TorchMNIST
from torchvision.datasets import FashionMNIST as TorchFashionMNIST

from gradsync.data.image_batches import ImageBatches, Normalization
from gradsync.data.memory import TensorSplit
from gradsync.data.options import MNISTConfig
from gradsync.data.spec import DataSpec, DataSplits
from gradsync.data.stats import FASHION_MNIST_STATS, MNIST_STATS, Stats


class MNIST:
    loader: ClassVar[type[TorchMNIST]] = TorchMNIST
    stats: ClassVar[Stats] = MNIST_STATS

    def __init__(self, *, root: str, download: bool = MNISTConfig.download) -> None:
        self.root = root
        self.download = download

    def known_spec(self) -> DataSpec:
        return DataSpec(task="classification", num_classes=10, input_shape=(1, 28, 28))

    def load(self) -> DataSplits:
        images = ImageBatches(Normalization(self.stats), augmentation=None)
        train = self.loader(self.root, train=True, download=self.download)
        test = self.loader(self.root, train=False)
        return DataSplits(
            spec=self.known_spec(),
            # N×28×28 uint8 as torchvision holds them: one channel added.
            train=TensorSplit(train.data.unsqueeze(1), train.targets, images=images),
            test=TensorSplit(test.data.unsqueeze(1), test.targets, images=images),
        )


class FashionMNIST(MNIST):
    loader: ClassVar[type[TorchMNIST]] = TorchFashionMNIST
    stats: ClassVar[Stats] = FASHION_MNIST_STATS
