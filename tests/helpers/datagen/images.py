"""Tiny CIFAR pickles, MNIST idx files and ImageNet-style JPEG folders in the real formats."""

from __future__ import annotations

import pickle
import struct
from functools import partial
from pathlib import Path

import numpy as np
from PIL import Image

CIFAR10_TRAIN_PER_BATCH = 4  # five data batches: 20 training images
CIFAR_TEST = 10
MNIST_TRAIN, MNIST_TEST = 20, 10
IMAGENET_CLASSES = ("n01440764", "n01443537", "n02102040")
IMAGENET_PER_CLASS = {"train": 3, "val": 2}
IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC = 2051, 2049  # 0x00000803: ubyte, 3 dims; 0x00000801: 1 dim


def _pixels(rng: np.random.Generator, count: int) -> np.ndarray:
    # N×3072 uint8: per image the red, green and blue 32×32 planes, row-major (the CIFAR layout).
    return rng.integers(0, 256, size=(count, 3 * 32 * 32), dtype=np.uint8)


def _dump(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        pickle.dump(obj, f, protocol=2)


def write_cifar10(root: Path, *, per_batch: int = CIFAR10_TRAIN_PER_BATCH) -> list[str]:
    """Five training batches of ``per_batch`` images (10,000 in the real files) and a test
    batch."""
    rng = np.random.default_rng(10)
    folder = root / "cifar-10-batches-py"
    batches = [f"data_batch_{i}" for i in range(1, 6)]
    for name in [*batches, "test_batch"]:
        count = CIFAR_TEST if name == "test_batch" else per_batch
        labels = [int(v) for v in rng.integers(0, 10, size=count)]
        _dump(
            folder / name,
            {
                "batch_label": name,
                "labels": labels,
                "data": _pixels(rng, count),
                "filenames": [f"{name}_{i}.png" for i in range(count)],
            },
        )
    names = ["airplane", "automobile", "bird", "cat", "deer"]
    names += ["dog", "frog", "horse", "ship", "truck"]
    _dump(
        folder / "batches.meta",
        {"label_names": names, "num_cases_per_batch": per_batch, "num_vis": 3072},
    )
    return [f"dataset.root={root}", "dataset.verify=false"]


def write_cifar100(root: Path) -> list[str]:
    rng = np.random.default_rng(100)
    folder = root / "cifar-100-python"
    for name, count in (("train", 5 * CIFAR10_TRAIN_PER_BATCH), ("test", CIFAR_TEST)):
        fine = [int(v) for v in rng.integers(0, 100, size=count)]
        _dump(
            folder / name,
            {
                "filenames": [f"{name}_{i}.png" for i in range(count)],
                "batch_label": f"{name} batch",
                "fine_labels": fine,
                "coarse_labels": [label // 5 for label in fine],
                "data": _pixels(rng, count),
            },
        )
    _dump(
        folder / "meta",
        {
            "fine_label_names": [f"fine_{i}" for i in range(100)],
            "coarse_label_names": [f"coarse_{i}" for i in range(20)],
        },
    )
    return [f"dataset.root={root}", "dataset.verify=false"]


def _write_idx(folder: Path, split: str, count: int, rng: np.random.Generator) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    images = rng.integers(0, 256, size=(count, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=count, dtype=np.uint8)
    # Big-endian uint32 header: magic, then the size of each dimension.
    header = struct.pack(">IIII", IDX_IMAGES_MAGIC, count, 28, 28)
    (folder / f"{split}-images-idx3-ubyte").write_bytes(header + images.tobytes())
    header = struct.pack(">II", IDX_LABELS_MAGIC, count)
    (folder / f"{split}-labels-idx1-ubyte").write_bytes(header + labels.tobytes())


def write_mnist(root: Path, folder: str = "MNIST") -> list[str]:
    """``folder``: MNIST or FashionMNIST (torchvision reads ``<root>/<folder>/raw``)."""
    rng = np.random.default_rng(len(folder))
    raw = root / folder / "raw"
    _write_idx(raw, "train", MNIST_TRAIN, rng)
    _write_idx(raw, "t10k", MNIST_TEST, rng)
    return [f"dataset.root={root}"]


def write_imagenet(root: Path) -> list[str]:
    rng = np.random.default_rng(2012)
    for split, per_class in IMAGENET_PER_CLASS.items():
        for wnid in IMAGENET_CLASSES:
            folder = root / split / wnid
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                # Odd sizes, not square: the transforms must produce the configured crop anyway.
                pixels = rng.integers(0, 256, size=(40 + 8 * i, 56, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{wnid}_{i}.JPEG", format="JPEG")
    return [f"dataset.root={root}"]


GENERATORS = {
    "cifar10": write_cifar10,
    "cifar100": write_cifar100,
    "mnist": partial(write_mnist, folder="MNIST"),
    "fashion_mnist": partial(write_mnist, folder="FashionMNIST"),
    "imagenet": write_imagenet,
}
