"""Schemas of the image models (ResNet, ResNet-20, VGG, AlexNet, CifarNet) and image datasets
(CIFAR, MNIST, ImageNet) plus the synthetic benchmark dataset."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from gradsync.config.checks import Options, Rule, option
from gradsync.config.schema import FileDatasetConfig, TaskBound
from gradsync.models.variant_names import VARIANTS  # torch-free: composing stays fast


# ---- models -------------------------------------------------------------------------------
@dataclass
class ImageModelConfig(TaskBound, Options):
    GROUP: ClassVar[str] = "model"
    variant: str = "auto"
    """cifar (small-image stem/head), imagenet (torchvision's), auto: cifar up to 64 px high."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda o: o.variant in VARIANTS,
            lambda o: f"model.variant must be one of {', '.join(VARIANTS)}, got {o.variant}",
        ),
    )


@dataclass
class ResNetConfig(ImageModelConfig):
    _target_: str = "gradsync.models.resnet.ResNet"
    _partial_: bool = True
    depth: int = option(18, choices=(18, 34, 50, 101, 152))
    """Layers: 18, 50 or 101 (torchvision's ResNets)."""


@dataclass
class VGGConfig(ImageModelConfig):
    _target_: str = "gradsync.models.vgg.VGG"
    _partial_: bool = True
    depth: int = option(16, choices=(11, 13, 16, 19))
    """Layers: 16 or 19."""
    batch_norm: bool = True
    """Batch normalization after each convolution."""


@dataclass
class AlexNetConfig(ImageModelConfig):
    _target_: str = "gradsync.models.alexnet.AlexNet"
    _partial_: bool = True
    dropout: float = option(0.2, at_least=0, below=1)
    """Dropout probability of the classifier's fully connected layers."""


@dataclass
class ResNet20Config(TaskBound, Options):
    GROUP: ClassVar[str] = "model"
    _target_: str = "gradsync.models.resnet20.ResNet20"
    _partial_: bool = True


@dataclass
class CifarNetConfig(TaskBound, Options):
    GROUP: ClassVar[str] = "model"
    _target_: str = "gradsync.models.cifarnet.CifarNet"
    _partial_: bool = True
    dropout: float = option(0.5, at_least=0, below=1)
    """Dropout probability before the classifier."""


# ---- datasets -----------------------------------------------------------------------------
@dataclass
class Cifar10Config(FileDatasetConfig, Options):
    GROUP: ClassVar[str] = "dataset"
    name: ClassVar[str] = "cifar10"
    folder: ClassVar[str] = "cifar-10-batches-py"
    files: ClassVar[tuple[str, ...]] = (
        *(f"data_batch_{i}" for i in range(1, 6)),
        "test_batch",
        "batches.meta",
    )
    _target_: str = "gradsync.data.cifar.Cifar10"
    verify: bool = True
    """Check the files' MD5 against the published archive (false: only that they exist)."""
    augment: bool = True
    """Random crop (4 px padding) and horizontal flip of training images."""

    def required_paths(self) -> list[str]:
        return [f"{self.folder}/{name}" for name in self.files]


@dataclass
class Cifar100Config(Cifar10Config):
    name: ClassVar[str] = "cifar100"
    folder: ClassVar[str] = "cifar-100-python"
    files: ClassVar[tuple[str, ...]] = ("train", "test", "meta")
    _target_: str = "gradsync.data.cifar.Cifar100"


IDX_LABELS_MAGIC = 2049
"""The first 4 bytes of an idx file of labels (unsigned bytes, one dimension)."""


@dataclass
class MNISTConfig(FileDatasetConfig, Options):
    GROUP: ClassVar[str] = "dataset"
    name: ClassVar[str] = "mnist"
    folder: ClassVar[str] = "MNIST/raw"
    _target_: str = "gradsync.data.mnist.MNIST"

    def required_paths(self) -> list[str]:
        kinds = ("images-idx3-ubyte", "labels-idx1-ubyte")
        return [f"{self.folder}/{split}-{kind}" for split in ("train", "t10k") for kind in kinds]

    def train_samples(self) -> int | None:
        """The count in the training labels' idx header (a magic number, then the count, both
        big-endian 32-bit), when the file is there."""
        try:
            with open(Path(self.root) / self.folder / "train-labels-idx1-ubyte", "rb") as file:
                header = file.read(8)
        except OSError:
            return None  # not there yet: the dataset check says so
        if len(header) < 8 or int.from_bytes(header[:4], "big") != IDX_LABELS_MAGIC:
            return None
        return int.from_bytes(header[4:], "big")


@dataclass
class FashionMNISTConfig(MNISTConfig):
    name: ClassVar[str] = "fashion_mnist"
    folder: ClassVar[str] = "FashionMNIST/raw"
    _target_: str = "gradsync.data.mnist.FashionMNIST"


@dataclass
class ImageNetConfig(FileDatasetConfig, Options):
    GROUP: ClassVar[str] = "dataset"
    name: ClassVar[str] = "imagenet"
    streamed_from_disk: ClassVar[bool] = True
    _target_: str = "gradsync.data.imagenet.ImageNet"
    download: bool = False
    """Always false: ImageNet cannot be fetched automatically; place it under ``root`` by hand."""
    image_size: int = option(224, at_least=32)
    """Side of the square crops the model sees."""
    augment: bool = True
    """RandomResizedCrop and horizontal flip of training images (false: the val transform)."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda o: not o.download,
            lambda o: (
                "imagenet cannot be downloaded automatically; place it by hand under "
                "dataset.root and set dataset.download=false"
            ),
        ),
    )

    def required_paths(self) -> list[str]:
        return ["train", "val"]

    def missing_message(self) -> str | None:
        # Not the base message: it suggests dataset.download=true, which cannot work here.
        missing = [p for p in self.required_paths() if not (Path(self.root) / p).is_dir()]
        if not missing:
            return None
        return (
            f"dataset imagenet not found: expected {Path(self.root) / missing[0]}; ImageNet "
            "cannot be downloaded, place it by hand as ROOT/train/<class>/* and "
            "ROOT/val/<class>/* (validation images sorted into class folders) and set "
            "dataset.root=ROOT"
        )


SYNTHETIC_IMAGE_SHAPE = (3, 32, 32)
"""CIFAR's images: what ``dataset=synthetic`` makes unless told otherwise."""


@dataclass
class SyntheticConfig(TaskBound, Options):
    GROUP: ClassVar[str] = "dataset"
    _target_: str = "gradsync.data.synthetic.Synthetic"
    kind: str = option("images", choices=("images", "tokens"))
    """images (classification) or tokens (language_model)."""
    num_samples: int = option(50_000, at_least=1)
    """Training samples: random inputs with random labels, for timing rather than accuracy."""
    num_test_samples: int = option(1_000, at_least=1)
    """Test samples."""
    pool_size: int = option(256, at_least=1)
    """Distinct random items behind each split, held on every worker's device (sample i is
    item i mod pool_size): 256 keep 224-px images to 150 MB per split."""
    image_shape: list[int] = option(
        default_factory=lambda: list(SYNTHETIC_IMAGE_SHAPE), each=True, at_least=1
    )
    """Channels, height, width of each image (kind=images)."""
    num_classes: int = option(10, at_least=2)
    """Classes of kind=images."""
    seq_len: int = option(128, at_least=1)
    """Tokens per sequence (kind=tokens)."""
    vocab_size: int = option(10_000, at_least=2)
    """Vocabulary size (kind=tokens)."""
    seed: int = 0
    """Seed of the generated data (the same on every worker)."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda o: len(o.image_shape) == 3,
            lambda o: f"dataset.image_shape must be [channels, height, width], got {o.image_shape}",
        ),
    )

    def task_kind(self) -> str:
        return "classification" if self.kind == "images" else "language_model"

    def train_samples(self) -> int:
        return self.num_samples


SCHEMAS: dict[str, dict[str, type]] = {
    "model": {
        "resnet18": ResNetConfig,
        "resnet50": ResNetConfig,
        "resnet101": ResNetConfig,
        "resnet20": ResNet20Config,
        "vgg16": VGGConfig,
        "vgg19": VGGConfig,
        "alexnet": AlexNetConfig,
        "cifarnet": CifarNetConfig,
    },
    "dataset": {
        "cifar10": Cifar10Config,
        "cifar100": Cifar100Config,
        "mnist": MNISTConfig,
        "fashion_mnist": FashionMNISTConfig,
        "imagenet": ImageNetConfig,
        "synthetic": SyntheticConfig,
    },
}
