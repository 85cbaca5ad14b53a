"""What a dataset's schema knows of its training set without loading it (``train_samples``),
which the command line checks one global batch against before any worker starts: it must be
what loading the data gives."""

from __future__ import annotations

import pytest

from gradsync.config.schema import SizedDataset
from gradsync.data.digits import Digits
from gradsync.data.mnist import MNIST, FashionMNIST
from gradsync.data.options import DigitsConfig, FashionMNISTConfig, MNISTConfig, SyntheticConfig
from tests.helpers.datagen.images import write_mnist


@pytest.mark.parametrize("test_fraction", [0.2, 0.1, 0.5, 0.333])
def test_digits_knows_its_training_split(test_fraction):
    known = DigitsConfig(test_fraction=test_fraction).train_samples()
    assert known == len(Digits(test_fraction=test_fraction).load().train)


@pytest.mark.parametrize(
    ("schema", "loader", "folder"),
    [(MNISTConfig, MNIST, "MNIST"), (FashionMNISTConfig, FashionMNIST, "FashionMNIST")],
)
def test_mnist_reads_its_count_from_the_idx_header(tmp_path, schema, loader, folder):
    assert schema(root=str(tmp_path)).train_samples() is None  # no files yet: not known
    write_mnist(tmp_path, folder)
    known = schema(root=str(tmp_path)).train_samples()
    assert known == len(loader(root=str(tmp_path)).load().train) > 0


def test_a_file_that_is_no_idx_labels_file_is_not_counted(tmp_path):
    labels = tmp_path / "MNIST" / "raw" / "train-labels-idx1-ubyte"
    labels.parent.mkdir(parents=True)
    labels.write_bytes(b"not an idx file")
    assert MNISTConfig(root=str(tmp_path)).train_samples() is None


def test_synthetic_has_the_samples_it_is_asked_for():
    assert SyntheticConfig(num_samples=123).train_samples() == 123
    assert isinstance(SyntheticConfig(), SizedDataset)
