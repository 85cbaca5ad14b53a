"""``dataset=imagenet``: torchvision's ImageFolder on ``<root>/train/<class>/*`` and
``<root>/val/<class>/*``.

ImageNet cannot be downloaded automatically (its licence needs a sign-in): place it by hand,
with the validation images sorted into the same class folders as the training images.
"""

from __future__ import annotations

from torchvision.datasets import ImageFolder

from gradsync.data import transforms
from gradsync.data.options import ImageNetConfig
from gradsync.data.spec import DataSpec, DataSplits


class ImageNet:
    def __init__(
        self,
        *,
        root: str,
        download: bool = ImageNetConfig.download,
        image_size: int = ImageNetConfig.image_size,
        augment: bool = ImageNetConfig.augment,
    ) -> None:
        if download:  # the schema refuses it first; this guards direct use
            raise ValueError("imagenet cannot be downloaded automatically; place it by hand")
        self.root = root
        self.image_size = image_size
        self.augment = augment

    def known_spec(self) -> DataSpec:
        """At most ILSVRC-2012's 1000 classes (a subset of its folders only has fewer)."""
        size = self.image_size
        return DataSpec(task="classification", num_classes=1000, input_shape=(3, size, size))

    def load(self) -> DataSplits:
        train = ImageFolder(
            f"{self.root}/train",
            transform=transforms.imagenet_train(self.image_size, augment=self.augment),
        )
        val = ImageFolder(f"{self.root}/val", transform=transforms.imagenet_eval(self.image_size))
        # ImageFolder numbers classes by sorted folder name: the same folders give the same labels.
        if val.classes != train.classes:
            raise ValueError(
                f"imagenet: {self.root}/val has {len(val.classes)} class folders and "
                f"{self.root}/train has {len(train.classes)}; both need the same class folders"
            )
        size = self.image_size
        return DataSplits(
            spec=DataSpec(
                task="classification",
                num_classes=len(train.classes),
                input_shape=(3, size, size),
            ),
            train=train,
            test=val,
        )
