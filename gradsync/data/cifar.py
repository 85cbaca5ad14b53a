"""``dataset=cifar10`` / ``cifar100``: torchvision's CIFAR loaders on the python-pickle archives.

torchvision reads the files; each split is then held in memory as one uint8 tensor
(``memory.py``), augmented (training: random crop of the 4-pixel zero-padded image, flip) and
normalized a batch at a time on the worker's device.

``verify=false`` keeps torchvision's loader but gives it no MD5 checksums, so it only checks
that each batch file exists (torchvision skips the hash when the expected MD5 is None). Test
fixtures and re-packed copies of the data cannot match the published checksums.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torchvision.datasets import CIFAR10, CIFAR100

from gradsync.data.image_batches import ImageBatches, Normalization, PadCropFlip
from gradsync.data.memory import TensorSplit
from gradsync.data.options import Cifar10Config
from gradsync.data.spec import DataSpec, DataSplits
from gradsync.data.stats import CIFAR10_STATS, CIFAR100_STATS, Stats


def _unchecked(files: list[list[str]]) -> list[list[str | None]]:
    return [[name, None] for name, _ in files]


class _UncheckedCIFAR10(CIFAR10):
    # Module-level classes (not built on the fly) so DataLoader workers can pickle them.
    train_list = _unchecked(CIFAR10.train_list)
    test_list = _unchecked(CIFAR10.test_list)
    meta: ClassVar[dict[str, str | None]] = {**CIFAR10.meta, "md5": None}


class _UncheckedCIFAR100(CIFAR100):
    train_list = _unchecked(CIFAR100.train_list)
    test_list = _unchecked(CIFAR100.test_list)
    meta: ClassVar[dict[str, str | None]] = {**CIFAR100.meta, "md5": None}


class Cifar10:
    name: ClassVar[str] = "cifar10"
    num_classes: ClassVar[int] = 10
    stats: ClassVar[Stats] = CIFAR10_STATS
    checked: ClassVar[type[CIFAR10]] = CIFAR10
    unchecked: ClassVar[type[CIFAR10]] = _UncheckedCIFAR10

    def __init__(
        self,
        *,
        root: str,
        download: bool = Cifar10Config.download,
        verify: bool = Cifar10Config.verify,
        augment: bool = Cifar10Config.augment,
    ) -> None:
        self.root = root
        self.download = download
        self.verify = verify
        self.augment = augment

    def known_spec(self) -> DataSpec:
        return DataSpec(
            task="classification", num_classes=self.num_classes, input_shape=(3, 32, 32)
        )

    def load(self) -> DataSplits:
        loader = self.checked if self.verify else self.unchecked
        try:
            train = loader(self.root, train=True, download=self.download)
            test = loader(self.root, train=False)
        except RuntimeError as exc:
            # torchvision's "not found or corrupted" does not say which option to change.
            raise RuntimeError(
                f"{self.name} files under {self.root}/{self.checked.base_folder} are missing or do "
                "not match the published MD5 checksums; set dataset.download=true to fetch them "
                "again, or dataset.verify=false to load them unchecked"
            ) from exc
        normalization = Normalization(self.stats)
        augmentation = PadCropFlip(padding=4) if self.augment else None
        return DataSplits(
            spec=self.known_spec(),
            train=_in_memory(train, ImageBatches(normalization, augmentation)),
            test=_in_memory(test, ImageBatches(normalization, None)),
        )


def _in_memory(split: CIFAR10, images: ImageBatches) -> TensorSplit:
    # torchvision keeps N×H×W×C uint8; stored N×C×H×W, the layout ToTensor gives each image.
    pixels = torch.from_numpy(split.data).permute(0, 3, 1, 2).contiguous()
    return TensorSplit(pixels, torch.tensor(split.targets, dtype=torch.int64), images=images)


class Cifar100(Cifar10):
    name: ClassVar[str] = "cifar100"
    num_classes: ClassVar[int] = 100
    stats: ClassVar[Stats] = CIFAR100_STATS
    checked: ClassVar[type[CIFAR10]] = CIFAR100
    unchecked: ClassVar[type[CIFAR10]] = _UncheckedCIFAR100
