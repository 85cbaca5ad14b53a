"""``dataset=movielens``: GroupLens' MovieLens ratings as implicit feedback (NCF protocol).

Reads the files as GroupLens publishes them (``ml-1m/ratings.dat`` or ``ml-20m/ratings.csv``
under ``root``); ``download=true`` fetches and unpacks the variant's zip archive first.
"""

from __future__ import annotations

import io
import tempfile
import urllib.request
import zipfile
from pathlib import Path

import numpy as np

from gradsync.data.implicit import implicit_feedback_splits
from gradsync.data.layouts import MOVIELENS_RATINGS
from gradsync.data.options import MovieLensConfig
from gradsync.data.spec import DataSplits

BASE_URL = "https://files.grouplens.org/datasets/movielens"
# Columns of both layouts: user, movie, rating, timestamp. The rating is ignored (implicit).
USER_ITEM_TIME = (0, 1, 3)


def read_ratings(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raw ``(user ids, movie ids, timestamps)`` of a ratings.dat or ratings.csv file."""
    if path.suffix == ".csv":  # ml-20m: header line, comma-separated
        table = np.loadtxt(
            path, delimiter=",", skiprows=1, usecols=USER_ITEM_TIME, dtype=np.int64, ndmin=2
        )
    else:  # ml-1m: "UserID::MovieID::Rating::Timestamp", no header
        # numpy's parser takes a one-character delimiter only.
        text = path.read_text(encoding="latin-1").replace("::", ":")
        table = np.loadtxt(
            io.StringIO(text), delimiter=":", usecols=USER_ITEM_TIME, dtype=np.int64, ndmin=2
        )
    return table[:, 0], table[:, 1], table[:, 2]


def download_variant(root: Path, variant: str) -> None:
    """Fetch ``<variant>.zip`` and unpack it to ``root/<variant>``.

    Every worker loads the data, so several may download at once: each unpacks into its own
    temporary directory and moves the result into place with one rename; the losers discard
    theirs.
    """
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{variant}-") as tmp:
        archive = Path(tmp) / f"{variant}.zip"
        urllib.request.urlretrieve(f"{BASE_URL}/{variant}.zip", archive)
        with zipfile.ZipFile(archive) as zipped:
            zipped.extractall(tmp)
        try:
            (Path(tmp) / variant).rename(root / variant)
        except OSError:
            if not (root / MOVIELENS_RATINGS[variant]).exists():
                raise


class MovieLens:
    def __init__(
        self,
        *,
        root: str,
        download: bool = MovieLensConfig.download,
        variant: str = MovieLensConfig.variant,
        negatives: int = MovieLensConfig.negatives,
        eval_negatives: int = MovieLensConfig.eval_negatives,
        seed: int = MovieLensConfig.seed,
    ) -> None:
        if variant not in MOVIELENS_RATINGS:
            raise ValueError(f"variant must be one of {', '.join(MOVIELENS_RATINGS)}")
        self.root = Path(root)
        self.download = download
        self.variant = variant
        self.negatives = negatives
        self.eval_negatives = eval_negatives
        self.seed = seed

    def known_spec(self) -> None:
        return None  # the numbers of users and items come from the ratings

    def load(self) -> DataSplits:
        path = self.root / MOVIELENS_RATINGS[self.variant]
        if self.download and not path.exists():
            download_variant(self.root, self.variant)
        users, items, timestamps = read_ratings(path)
        return implicit_feedback_splits(
            users,
            items,
            timestamps,
            negatives=self.negatives,
            eval_negatives=self.eval_negatives,
            seed=self.seed,
        )
