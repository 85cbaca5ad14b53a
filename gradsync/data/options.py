"""Every dataset's options (``dataset=``): scikit-learn's digits, CIFAR, MNIST, ImageNet, the
synthetic benchmark data, the word-level corpora and MovieLens. Torch-free: the command line
checks them (and a global batch against a training set's size) before importing torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from gradsync.config.checks import (
    MAX_SAMPLES,
    MAX_TOKENS,
    MAX_VOCAB,
    Options,
    Rule,
    option,
    seed_option,
)
from gradsync.config.schema import LANGUAGE_MODEL, RECOMMENDATION, FileDatasetConfig, TaskBound
from gradsync.data.layouts import MOVIELENS_RATINGS, PTB_FILES, WIKITEXT2_FILES

MAX_IMAGE_SIDE = 2**13
"""Pixels of an image's side (or its channels): a larger image is a mistake."""
MAX_NEGATIVES = 10**3
"""Sampled negatives per positive: MovieLens-20M's 20 million ratings times this fill memory."""

DIGITS = 1797
"""Images in scikit-learn's bundled digits (``dataset=digits``)."""


@dataclass
class DigitsConfig(TaskBound, Options):
    GROUP: ClassVar[str] = "dataset"
    _target_: str = "gradsync.data.digits.Digits"
    test_fraction: float = option(0.2, above=0, below=1)
    """Fraction of scikit-learn's 1,797 digits held out as the test split."""
    split_seed: int = seed_option(0)
    """Seed of the train/test split (fixed, so every run tests on the same images)."""

    def train_samples(self) -> int:
        return DIGITS - round(self.test_fraction * DIGITS)  # as gradsync.data.digits splits


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
    image_size: int = option(224, at_least=32, limit=MAX_IMAGE_SIDE)
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
    num_samples: int = option(50_000, at_least=1, limit=MAX_SAMPLES)
    """Training samples: random inputs with random labels, for timing rather than accuracy."""
    num_test_samples: int = option(1_000, at_least=1, limit=MAX_SAMPLES)
    """Test samples."""
    pool_size: int = option(256, at_least=1, limit=MAX_SAMPLES)
    """Distinct random items behind each split, held on every worker's device (sample i is
    item i mod pool_size): 256 keep 224-px images to 150 MB per split."""
    image_shape: list[int] = option(
        default_factory=lambda: list(SYNTHETIC_IMAGE_SHAPE),
        each=True,
        at_least=1,
        limit=MAX_IMAGE_SIDE,
    )
    """Channels, height, width of each image (kind=images)."""
    num_classes: int = option(10, at_least=2, limit=MAX_VOCAB)
    """Classes of kind=images."""
    seq_len: int = option(128, at_least=1, limit=MAX_TOKENS)
    """Tokens per sequence (kind=tokens)."""
    vocab_size: int = option(10_000, at_least=2, limit=MAX_VOCAB)
    """Vocabulary size (kind=tokens)."""
    seed: int = seed_option(0)
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


# ---- datasets -----------------------------------------------------------------------------
@dataclass
class WordCorpusConfig(FileDatasetConfig, Options):
    """Shared by the word-level corpora; subclasses name the files and the Hub copy."""

    GROUP: ClassVar[str] = "dataset"
    TASK: ClassVar[str] = LANGUAGE_MODEL
    FILES: ClassVar[dict[str, str]] = {}
    seq_len: int = option(35, at_least=1, limit=MAX_TOKENS)
    """Tokens per training/evaluation window (the BPTT length)."""
    eval_split: str = option("valid", choices=("valid", "test"))
    """Split evaluated during training: valid or test."""
    max_vocab: int | None = option(None, at_least=2, hint="(one word and <unk>)", limit=MAX_VOCAB)
    """Keep only the most frequent words, <unk> included (null: every training word)."""
    hub_name: str = ""
    """Hugging Face Hub dataset fetched when dataset.download=true."""
    hub_config: str | None = None
    """Configuration of that Hub dataset (null: its default)."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda o: bool(o.hub_name),
            lambda o: "dataset.hub_name must name a Hugging Face Hub dataset",
        ),
    )

    def required_paths(self) -> list[str]:
        return list(self.FILES.values())


@dataclass
class WikiText2Config(WordCorpusConfig):
    name: ClassVar[str] = "wikitext2"
    FILES: ClassVar[dict[str, str]] = WIKITEXT2_FILES
    _target_: str = "gradsync.data.text.WikiText2"
    hub_name: str = "wikitext"
    hub_config: str | None = "wikitext-2-raw-v1"


@dataclass
class PTBConfig(WordCorpusConfig):
    name: ClassVar[str] = "ptb"
    FILES: ClassVar[dict[str, str]] = PTB_FILES
    _target_: str = "gradsync.data.text.PennTreebank"
    hub_name: str = "ptb_text_only"
    hub_config: str | None = None


@dataclass
class MovieLensConfig(FileDatasetConfig, Options):
    GROUP: ClassVar[str] = "dataset"
    TASK: ClassVar[str] = RECOMMENDATION
    name: ClassVar[str] = "movielens"
    _target_: str = "gradsync.data.movielens.MovieLens"
    variant: str = "ml-1m"
    """ml-1m or ml-20m."""
    negatives: int = option(4, at_least=0, limit=MAX_NEGATIVES)
    """Sampled negatives per training positive."""
    eval_negatives: int = option(99, at_least=1, limit=MAX_NEGATIVES)
    """Sampled negatives ranked against each user's held-out positive."""
    seed: int = seed_option(0)
    """Seeds the negative sampling (the same on every worker)."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda o: o.variant in MOVIELENS_RATINGS,
            lambda o: (
                f"dataset.variant must be one of {', '.join(MOVIELENS_RATINGS)}, got {o.variant}"
            ),
        ),
    )

    def required_paths(self) -> list[str]:
        return [MOVIELENS_RATINGS[self.variant]]
