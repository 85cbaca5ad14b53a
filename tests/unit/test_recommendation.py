"""MovieLens as implicit feedback (leave-one-out, negatives, both file layouts), NeuMF, HR@10."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from gradsync.data import movielens
from gradsync.data.implicit import NegativeSampler, leave_one_out
from gradsync.data.movielens import MovieLens
from gradsync.data.spec import DataSpec, DataSplits
from gradsync.jobs.compose import ConfigError, compose_jobs
from gradsync.models.ncf import NeuMF
from gradsync.tasks.recommendation import RecommendationTask
from tests.helpers.datagen.movielens import Rating, random_ratings, write_ratings


def _load(root: Path, variant: str = "ml-1m", **options) -> DataSplits:
    return MovieLens(root=str(root), variant=variant, **options).load()


def _positives(rows: list[Rating]) -> dict[int, set[int]]:
    """Re-indexed positives per user (ids in ascending order of the raw ids, as the loader)."""
    users = {u: i for i, u in enumerate(sorted({r[0] for r in rows}))}
    items = {m: i for i, m in enumerate(sorted({r[1] for r in rows}))}
    found: dict[int, set[int]] = {}
    for user, movie, _, _ in rows:
        found.setdefault(users[user], set()).add(items[movie])
    return found


def test_leave_one_out_holds_out_the_latest_item_ties_by_item_id():
    users = np.array([0, 0, 0, 1, 1, 1])
    items = np.array([5, 2, 9, 4, 3, 1])
    times = np.array([10, 30, 20, 7, 7, 5])
    split = leave_one_out(users, items, times)
    assert split.test_users.tolist() == [0, 1] and split.test_items.tolist() == [2, 4]
    assert sorted(zip(split.train_users.tolist(), split.train_items.tolist(), strict=True)) == [
        (0, 5),
        (0, 9),
        (1, 1),
        (1, 3),
    ]


def test_a_user_with_every_item_cannot_get_negatives():
    users, items = np.array([0, 0, 1]), np.array([0, 1, 0])
    with pytest.raises(ValueError, match="user 0 interacted with all 2 items"):
        NegativeSampler(users, items, num_users=2, num_items=2)
    sampler = NegativeSampler(users, items, num_users=2, num_items=3)
    drawn = sampler.sample(np.array([0] * 50 + [1] * 50), np.random.default_rng(0))
    assert set(drawn[:50].tolist()) == {2} and set(drawn[50:].tolist()) == {1, 2}


def test_movielens_splits_positives_negatives_and_candidates(tmp_path):
    rows = random_ratings()
    write_ratings(tmp_path, "ml-1m", rows)
    splits = _load(tmp_path, negatives=4, eval_negatives=99)
    positives = _positives(rows)
    assert splits.spec.task == "recommendation"
    assert splits.spec.num_users == len(positives)
    assert splits.spec.num_items == len({r[1] for r in rows})

    users, items, labels = splits.train.tensors
    assert users.dtype == items.dtype == torch.int64 and labels.dtype == torch.float32
    assert int((labels == 1).sum()) == len(rows) - len(positives)  # all but one per user
    assert int((labels == 0).sum()) == 4 * int((labels == 1).sum())
    for user, item, label in zip(users.tolist(), items.tolist(), labels.tolist(), strict=True):
        assert (item in positives[user]) == (label == 1.0)

    test_users, candidates = splits.test.tensors
    assert test_users.tolist() == list(range(len(positives)))
    assert candidates.shape == (len(positives), 100) and candidates.dtype == torch.int64
    latest = {}
    by_user: dict[int, list[Rating]] = {}
    for row in rows:
        by_user.setdefault(row[0], []).append(row)
    item_index = {m: i for i, m in enumerate(sorted({r[1] for r in rows}))}
    for user, raw in enumerate(sorted(by_user)):
        newest = max(by_user[raw], key=lambda r: (r[3], r[1]))
        latest[user] = item_index[newest[1]]
    assert candidates[:, 0].tolist() == [latest[u] for u in range(len(positives))]
    for user, row in enumerate(candidates.tolist()):
        assert not set(row[1:]) & positives[user]
    # The held-out positive is not among the training positives.
    train_pairs = set(zip(users[labels == 1].tolist(), items[labels == 1].tolist(), strict=True))
    assert not {(u, latest[u]) for u in latest} & train_pairs


def test_negatives_are_reproducible_from_the_seed(tmp_path):
    write_ratings(tmp_path, "ml-1m", random_ratings())
    a, b, c = _load(tmp_path), _load(tmp_path), _load(tmp_path, seed=1)
    assert all(torch.equal(x, y) for x, y in zip(a.train.tensors, b.train.tensors, strict=True))
    assert torch.equal(a.test.tensors[1], b.test.tensors[1])
    assert not torch.equal(a.test.tensors[1], c.test.tensors[1])


def test_ml1m_and_ml20m_layouts_parse_to_the_same_splits(tmp_path):
    rows = random_ratings(seed=3)
    write_ratings(tmp_path, "ml-1m", rows)
    write_ratings(tmp_path, "ml-20m", rows)
    assert (
        (tmp_path / "ml-20m" / "ratings.csv")
        .read_text()
        .startswith("userId,movieId,rating,timestamp\n")
    )
    one, twenty = _load(tmp_path, "ml-1m"), _load(tmp_path, "ml-20m")
    assert one.spec == twenty.spec
    for x, y in zip(
        one.train.tensors + one.test.tensors,
        twenty.train.tensors + twenty.test.tensors,
        strict=True,
    ):
        assert torch.equal(x, y)


def test_download_unpacks_the_grouplens_archive(tmp_path, monkeypatch):
    # A local stand-in for files.grouplens.org: the same zip layout (a folder per variant).
    archive = tmp_path / "ml-1m.zip"
    source = tmp_path / "source"
    write_ratings(source, "ml-1m", random_ratings())
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.write(source / "ml-1m" / "ratings.dat", "ml-1m/ratings.dat")
    fetched: list[str] = []

    def fake_urlretrieve(url: str, dest: Path) -> None:
        fetched.append(url)
        Path(dest).write_bytes(archive.read_bytes())

    monkeypatch.setattr(movielens.urllib.request, "urlretrieve", fake_urlretrieve)
    root = tmp_path / "data"
    splits = _load(root, download=True)
    assert fetched == ["https://files.grouplens.org/datasets/movielens/ml-1m.zip"]
    assert (root / "ml-1m" / "ratings.dat").is_file() and len(splits.test) == 30
    assert [p.name for p in root.iterdir()] == ["ml-1m"]  # no temporary files left
    _load(root, download=True)
    assert len(fetched) == 1  # already there: not fetched again


@pytest.mark.parametrize(
    ("variant", "expected"), [("ml-1m", "ratings.dat"), ("ml-20m", "ratings.csv")]
)
def test_missing_movielens_is_one_clear_line(variant, expected, tmp_path):
    overrides = ["model=ncf", "dataset=movielens", f"dataset.variant={variant}"]
    with pytest.raises(ConfigError) as info:
        compose_jobs([*overrides, f"dataset.root={tmp_path}"], multirun=False)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"dataset movielens not found: expected {tmp_path / variant / expected}")


def test_ncf_gives_one_logit_per_pair_and_trains():
    spec = DataSpec(task="recommendation", num_users=20, num_items=30)
    model = NeuMF(spec=spec, factors=8, mlp_layers=[16, 8, 4], dropout=0.5)
    users, items = torch.randint(0, 20, (6,)), torch.randint(0, 30, (6,))
    logits = model(users, items)
    assert logits.shape == (6,)
    logits.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    assert model.predict.in_features == 8 + 4 and model.user_mlp.embedding_dim == 8


class Oracle(nn.Module):
    """Scores the one item each user is known to like highest."""

    def __init__(self, liked: Tensor) -> None:
        super().__init__()
        self.liked = liked

    def forward(self, users: Tensor, items: Tensor) -> Tensor:
        return (items == self.liked[users]).float() * 10 - 5


def test_hit_rate_is_one_for_a_model_that_ranks_the_positive_first():
    spec = DataSpec(task="recommendation", num_users=4, num_items=50)
    task = RecommendationTask(spec=spec)
    users = torch.arange(4)
    candidates = torch.tensor(
        [[7, *range(20, 30)], [3, *range(30, 40)], [0, *range(40, 50)], [9, *range(10, 20)]]
    )
    sums = task.eval_sums(Oracle(candidates[:, 0]), (users, candidates))
    assert task.eval_metrics(sums)["eval/hr@10"] == 1.0
    # Scoring by item id ranks all ten negatives (ids >= 10) above each positive: no hit.
    sums = task.eval_sums(lambda u, items: items.float(), (users, candidates))
    assert task.eval_metrics(sums)["eval/hr@10"] == 0.0
