"""Image datasets: the generated files (real on-disk formats) load through the real torchvision
loaders with the right shapes, labels and normalization; missing data is reported up front."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from gradsync.config.instantiate import build
from gradsync.data.spec import DataSplits
from gradsync.data.stats import (
    CIFAR10_STATS,
    CIFAR100_STATS,
    FASHION_MNIST_STATS,
    MNIST_STATS,
    Stats,
)
from gradsync.data.synthetic import Synthetic
from gradsync.jobs.compose import ConfigError, compose_jobs
from tests.helpers.datagen.images import (
    IMAGENET_CLASSES,
    IMAGENET_PER_CLASS,
    write_cifar10,
    write_cifar100,
    write_imagenet,
    write_mnist,
)


def load(option: str, *overrides: str) -> DataSplits:
    job = [f"dataset={option}", *overrides]
    cfg = compose_jobs(job, multirun=False, launcher_here=False)[0]  # loaded, not launched
    return build(cfg.dataset, path="dataset").load()


def normalized(pixels: np.ndarray, stats: Stats) -> torch.Tensor:
    """C×H×W uint8 -> what ToTensor + Normalize must give."""
    mean, std = (torch.tensor(s).view(-1, 1, 1) for s in stats)
    return (torch.tensor(pixels).float() / 255 - mean) / std


def unpickle(path: Path) -> dict:
    with path.open("rb") as f:
        return pickle.load(f, encoding="latin1")


# ---- CIFAR --------------------------------------------------------------------------------
def test_cifar10_loads_pixels_labels_and_normalizes(tmp_path):
    overrides = write_cifar10(tmp_path)
    splits = load("cifar10", *overrides, "dataset.augment=false")
    assert splits.spec.num_classes == 10 and splits.spec.input_shape == (3, 32, 32)
    assert (len(splits.train), len(splits.test)) == (20, 10)
    folder = tmp_path / "cifar-10-batches-py"
    first, last = unpickle(folder / "data_batch_1"), unpickle(folder / "data_batch_5")
    test = unpickle(folder / "test_batch")
    for dataset, batch, row, index in (
        (splits.train, first, 0, 0),
        (splits.train, last, 3, 19),
        (splits.test, test, 9, 9),
    ):
        x, y = dataset[index]
        assert x.dtype == torch.float32 and x.shape == (3, 32, 32)
        assert y == batch["labels"][row]
        expected = normalized(batch["data"][row].reshape(3, 32, 32), CIFAR10_STATS)
        torch.testing.assert_close(x, expected)


def test_cifar100_uses_fine_labels(tmp_path):
    splits = load("cifar100", *write_cifar100(tmp_path))
    assert splits.spec.num_classes == 100
    train = unpickle(tmp_path / "cifar-100-python" / "train")
    assert [splits.train[i][1] for i in range(len(splits.train))] == train["fine_labels"]
    x, _ = splits.test[0]
    expected = normalized(
        unpickle(tmp_path / "cifar-100-python" / "test")["data"][0].reshape(3, 32, 32),
        CIFAR100_STATS,
    )
    torch.testing.assert_close(x, expected)  # the test split is never augmented


def test_cifar_augmentation_crops_and_flips_training_images_only(tmp_path):
    splits = load("cifar10", *write_cifar10(tmp_path))
    torch.manual_seed(0)
    draws = [splits.train[0][0] for _ in range(8)]
    assert all(d.shape == (3, 32, 32) for d in draws)
    assert any(not torch.equal(draws[0], d) for d in draws[1:])
    assert torch.equal(splits.test[0][0], splits.test[0][0])


@pytest.mark.parametrize(
    ("option", "write"), [("cifar10", write_cifar10), ("cifar100", write_cifar100)]
)
def test_cifar_verify_rejects_files_that_fail_the_checksum(option, write, tmp_path):
    overrides = [o for o in write(tmp_path) if o != "dataset.verify=false"]
    with pytest.raises(RuntimeError, match=r"MD5 checksums.*dataset\.verify=false"):
        load(option, *overrides)
    assert len(load(option, *overrides, "dataset.verify=false").train) == 20


# ---- MNIST --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("option", "folder", "stats"),
    [
        ("mnist", "MNIST", MNIST_STATS),
        ("fashion_mnist", "FashionMNIST", FASHION_MNIST_STATS),
    ],
)
def test_mnist_family_reads_idx_files(option, folder, stats, tmp_path):
    splits = load(option, *write_mnist(tmp_path, folder))
    assert splits.spec.num_classes == 10 and splits.spec.input_shape == (1, 28, 28)
    assert (len(splits.train), len(splits.test)) == (20, 10)
    raw = tmp_path / folder / "raw"
    images = (raw / "t10k-images-idx3-ubyte").read_bytes()
    labels = (raw / "t10k-labels-idx1-ubyte").read_bytes()
    assert struct.unpack(">IIII", images[:16]) == (2051, 10, 28, 28)
    pixels = np.frombuffer(images[16:], dtype=np.uint8).reshape(10, 1, 28, 28)
    for i in (0, 9):
        x, y = splits.test[i]
        assert y == labels[8 + i]
        torch.testing.assert_close(x, normalized(pixels[i], stats))


# ---- ImageNet -----------------------------------------------------------------------------
def test_imagenet_folders_give_classes_and_crops(tmp_path):
    splits = load("imagenet", *write_imagenet(tmp_path), "dataset.image_size=48")
    assert splits.spec.num_classes == len(IMAGENET_CLASSES)
    assert splits.spec.input_shape == (3, 48, 48)
    per_class = IMAGENET_PER_CLASS["val"]
    assert len(splits.train) == len(IMAGENET_CLASSES) * IMAGENET_PER_CLASS["train"]
    assert [splits.test[i][1] for i in range(len(splits.test))] == [
        c for c in range(len(IMAGENET_CLASSES)) for _ in range(per_class)
    ]
    x, _ = splits.train[0]
    assert x.shape == (3, 48, 48) and x.dtype == torch.float32
    # Normalized with ImageNet statistics: a mid-grey pixel would be near 0, the range spans it.
    assert x.min() < 0 < x.max()


def test_imagenet_val_must_have_the_training_class_folders(tmp_path):
    overrides = write_imagenet(tmp_path)
    (tmp_path / "val" / "n09999999").mkdir()
    (tmp_path / "val" / IMAGENET_CLASSES[0] / f"{IMAGENET_CLASSES[0]}_0.JPEG").rename(
        tmp_path / "val" / "n09999999" / "x.JPEG"
    )
    with pytest.raises(ValueError, match="same class folders"):
        load("imagenet", *overrides)


# ---- missing data -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("cifar10", "cifar-10-batches-py/data_batch_1"),
        ("cifar100", "cifar-100-python/train"),
        ("mnist", "MNIST/raw/train-images-idx3-ubyte"),
        ("fashion_mnist", "FashionMNIST/raw/train-images-idx3-ubyte"),
        ("imagenet", "train"),
    ],
)
def test_missing_dataset_is_one_line_naming_the_expected_path(option, expected, tmp_path):
    with pytest.raises(ConfigError) as info:
        compose_jobs([f"dataset={option}", f"dataset.root={tmp_path}"], multirun=False)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"dataset {option} not found: expected {tmp_path / expected}")
    if option == "imagenet":
        assert "by hand" in message and "download=true" not in message
    else:
        assert "dataset.download=true" in message


def test_partly_missing_cifar_names_the_missing_file(tmp_path):
    write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "test_batch").unlink()
    with pytest.raises(ConfigError, match=r"expected \S*cifar-10-batches-py/test_batch;"):
        compose_jobs(["dataset=cifar10", f"dataset.root={tmp_path}"], multirun=False)


def test_imagenet_cannot_be_downloaded(tmp_path):
    with pytest.raises(ConfigError, match="imagenet cannot be downloaded"):
        compose_jobs(
            ["dataset=imagenet", f"dataset.root={tmp_path}", "dataset.download=true"],
            multirun=False,
        )


# ---- synthetic ----------------------------------------------------------------------------
def test_synthetic_images_repeat_a_pool_drawn_once_from_the_seed():
    overrides = ["dataset.num_samples=40", "dataset.image_shape=[3,16,16]", "dataset.num_classes=5"]
    overrides.append("dataset.pool_size=8")
    a, b = load("synthetic", *overrides), load("synthetic", *overrides)
    assert a.spec.task == "classification" and a.spec.input_shape == (3, 16, 16)
    assert (len(a.train), len(a.test)) == (40, 1000)
    assert a.train.tensors[0].shape == (8, 3, 16, 16)  # only the pool is held
    x, y = a.train[7]
    assert x.shape == (3, 16, 16) and x.dtype == torch.float32 and 0 <= y < 5
    assert torch.equal(x, b.train[7][0]) and y == b.train[7][1]  # on every worker alike
    assert torch.equal(x, a.train[15][0]) and y == a.train[15][1]  # item 7 of the pool again
    assert not torch.equal(x, a.train[8][0]) and not torch.equal(x, a.test[7][0])
    other_seed = load("synthetic", *overrides, "dataset.seed=1")
    assert not torch.equal(x, other_seed.train[7][0])


def test_synthetic_task_follows_its_kind():
    # The default model (cnn) is for classification: fine for images, refused for tokens.
    compose_jobs(["dataset=synthetic"], multirun=False)
    with pytest.raises(ConfigError, match="dataset is for language_model"):
        compose_jobs(["dataset=synthetic", "dataset.kind=tokens"], multirun=False)


def test_synthetic_tokens_are_shifted_sequences():
    splits = Synthetic(kind="tokens", num_samples=10, seq_len=12, vocab_size=30).load()
    assert splits.spec.task == "language_model" and splits.spec.vocab_size == 30
    inputs, targets = splits.train[3]
    assert inputs.shape == targets.shape == (12,) and inputs.dtype == torch.int64
    assert torch.equal(inputs[1:], targets[:-1])
    assert int(inputs.min()) >= 0 and int(inputs.max()) < 30
    assert torch.equal(
        inputs, Synthetic(kind="tokens", seq_len=12, vocab_size=30).load().train[3][0]
    )


def test_digits_are_scikit_learns_images_split_and_standardized():
    from sklearn.datasets import load_digits

    bunch = load_digits()
    data = load("digits")
    assert len(data.test) == round(0.2 * len(bunch.target))
    train = data.train.tensors[0]
    assert train.mean().abs() < 1e-5 and (train.std() - 1).abs() < 1e-5
    # Undo the standardization (pixels run 0..16, both ends occur) and compare, row by row
    # with its label, to what scikit-learn loads.
    images = torch.cat([train, data.test.tensors[0]]).flatten(1)
    pixels = ((images - images.min()) / (images.max() - images.min()) * 16).round()
    labels = torch.cat([data.train.tensors[1], data.test.tensors[1]])
    ours = sorted(map(tuple, torch.cat([pixels, labels[:, None]], 1).tolist()))
    theirs = np.concatenate([bunch.data, bunch.target[:, None]], 1)
    assert ours == sorted(map(tuple, theirs.astype(float).tolist()))
