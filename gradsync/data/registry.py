"""Every ``dataset=`` option, once: its name and its options class. The option's YAML file in
``conf/dataset/`` starts from the class (``/schema/dataset/<name>``). Torch-free."""

from __future__ import annotations

from collections.abc import Mapping

from gradsync.data.options import (
    Cifar10Config,
    Cifar100Config,
    DigitsConfig,
    FashionMNISTConfig,
    ImageNetConfig,
    MNISTConfig,
    MovieLensConfig,
    PTBConfig,
    SyntheticConfig,
    WikiText2Config,
)

DATASETS: Mapping[str, type] = {
    "digits": DigitsConfig,
    "cifar10": Cifar10Config,
    "cifar100": Cifar100Config,
    "mnist": MNISTConfig,
    "fashion_mnist": FashionMNISTConfig,
    "imagenet": ImageNetConfig,
    "synthetic": SyntheticConfig,
    "wikitext2": WikiText2Config,
    "ptb": PTBConfig,
    "movielens": MovieLensConfig,
}
