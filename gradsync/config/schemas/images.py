"""Schemas of the image models (ResNet, ResNet-20, VGG, AlexNet, CifarNet) and image datasets
(CIFAR, MNIST, ImageNet) plus the synthetic benchmark dataset."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from gradsync.config.checks import require
from gradsync.config.schema import FileDatasetConfig, TaskBound
from gradsync.models.variant_names import VARIANTS  # torch-free: composing stays fast


# ---- models -------------------------------------------------------------------------------
@dataclass
class ImageModelConfig(TaskBound):
    variant: str = "auto"
    """cifar (small-image stem/head), imagenet (torchvision's), auto: cifar up to 64 px high."""

    def __post_init__(self) -> None:
        require(
            self.variant in VARIANTS,
            f"model.variant must be one of {', '.join(VARIANTS)}, got {self.variant}",
        )


@dataclass
class ResNetConfig(ImageModelConfig):
    _target_: str = "gradsync.models.resnet.ResNet"
    _partial_: bool = True
    depth: int = 18
    """Layers: 18, 50 or 101 (torchvision's ResNets)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        depths = (18, 34, 50, 101, 152)
        require(self.depth in depths, f"model.depth must be one of {depths}, got {self.depth}")


@dataclass
class VGGConfig(ImageModelConfig):
    _target_: str = "gradsync.models.vgg.VGG"
    _partial_: bool = True
    depth: int = 16
    """Layers: 16 or 19."""
    batch_norm: bool = True
    """Batch normalization after each convolution."""

    def __post_init__(self) -> None:
        super().__post_init__()
        depths = (11, 13, 16, 19)
        require(self.depth in depths, f"model.depth must be one of {depths}, got {self.depth}")


@dataclass
class AlexNetConfig(ImageModelConfig):
    _target_: str = "gradsync.models.alexnet.AlexNet"
    _partial_: bool = True
    dropout: float = 0.2
    """Dropout probability of the classifier's fully connected layers."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 <= self.dropout < 1, f"model.dropout must be in [0, 1), got {self.dropout}")


@dataclass
class ResNet20Config(TaskBound):
    _target_: str = "gradsync.models.resnet20.ResNet20"
    _partial_: bool = True


@dataclass
class CifarNetConfig(TaskBound):
    _target_: str = "gradsync.models.cifarnet.CifarNet"
    _partial_: bool = True
    dropout: float = 0.5
    """Dropout probability before the classifier."""

    def __post_init__(self) -> None:
        require(0 <= self.dropout < 1, f"model.dropout must be in [0, 1), got {self.dropout}")


# ---- datasets -----------------------------------------------------------------------------
@dataclass
class Cifar10Config(FileDatasetConfig):
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
class MNISTConfig(FileDatasetConfig):
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
class ImageNetConfig(FileDatasetConfig):
    name: ClassVar[str] = "imagenet"
    streamed_from_disk: ClassVar[bool] = True
    _target_: str = "gradsync.data.imagenet.ImageNet"
    download: bool = False
    """Always false: ImageNet cannot be fetched automatically; place it under ``root`` by hand."""
    image_size: int = 224
    """Side of the square crops the model sees."""
    augment: bool = True
    """RandomResizedCrop and horizontal flip of training images (false: the val transform)."""

    def __post_init__(self) -> None:
        require(
            not self.download,
            "imagenet cannot be downloaded automatically; place it by hand under dataset.root "
            "and set dataset.download=false",
        )
        require(self.image_size >= 32, f"dataset.image_size must be >= 32, got {self.image_size}")

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


@dataclass
class SyntheticConfig(TaskBound):
    _target_: str = "gradsync.data.synthetic.Synthetic"
    kind: str = "images"
    """images (classification) or tokens (language_model)."""
    num_samples: int = 50_000
    """Training samples: random inputs with random labels, for timing rather than accuracy."""
    num_test_samples: int = 1_000
    """Test samples."""
    pool_size: int = 256
    """Distinct random items behind each split, held on every worker's device (sample i is
    item i mod pool_size): 256 keep 224-px images to 150 MB per split."""
    image_shape: list[int] = field(default_factory=lambda: [3, 32, 32])
    """Channels, height, width of each image (kind=images)."""
    num_classes: int = 10
    """Classes of kind=images."""
    seq_len: int = 128
    """Tokens per sequence (kind=tokens)."""
    vocab_size: int = 10_000
    """Vocabulary size (kind=tokens)."""
    seed: int = 0
    """Seed of the generated data (the same on every worker)."""

    def task_kind(self) -> str:
        return "classification" if self.kind == "images" else "language_model"

    def train_samples(self) -> int:
        return self.num_samples

    def __post_init__(self) -> None:
        require(
            self.kind in ("images", "tokens"),
            f"dataset.kind must be images or tokens, got {self.kind}",
        )
        require(self.num_samples >= 1, "dataset.num_samples must be >= 1")
        require(self.num_test_samples >= 1, "dataset.num_test_samples must be >= 1")
        require(self.pool_size >= 1, f"dataset.pool_size must be >= 1, got {self.pool_size}")
        require(
            len(self.image_shape) == 3 and all(s >= 1 for s in self.image_shape),
            f"dataset.image_shape must be [channels, height, width], got {self.image_shape}",
        )
        require(self.num_classes >= 2, "dataset.num_classes must be >= 2")
        require(self.seq_len >= 1, "dataset.seq_len must be >= 1")
        require(self.vocab_size >= 2, "dataset.vocab_size must be >= 2")


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
