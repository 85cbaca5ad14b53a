"""Tiny MovieLens ratings in GroupLens' layouts (ml-1m ``ratings.dat``, ml-20m ``ratings.csv``)."""

from __future__ import annotations

import random
from pathlib import Path

from gradsync.data.layouts import MOVIELENS_RATINGS

Rating = tuple[int, int, float, int]  # user id, movie id, rating, timestamp


def random_ratings(*, users: int = 30, movies: int = 50, seed: int = 0) -> list[Rating]:
    """Each user rates 5-15 distinct movies; ids are sparse, as in the real files."""
    rng = random.Random(seed)
    rows: list[Rating] = []
    for user in range(1, users + 1):
        for movie in rng.sample(range(movies), rng.randint(5, 15)):
            stars = rng.choice([1, 2, 3, 4, 5]) if rng.random() < 0.5 else rng.randint(1, 10) / 2
            rows.append((user * 3, movie * 7 + 1, stars, 978_300_000 + rng.randint(0, 50)))
    return rows


def write_ratings(root: Path, variant: str, rows: list[Rating]) -> Path:
    path = root / MOVIELENS_RATINGS[variant]
    path.parent.mkdir(parents=True, exist_ok=True)
    if variant == "ml-1m":  # integer stars, "::"-separated, no header
        text = "".join(f"{u}::{m}::{int(r)}::{t}\n" for u, m, r, t in rows)
    else:  # half stars, CSV with a header
        text = "userId,movieId,rating,timestamp\n"
        text += "".join(f"{u},{m},{r:.1f},{t}\n" for u, m, r, t in rows)
    path.write_text(text, encoding="utf-8")
    return path


def write_movielens(root: Path) -> list[str]:
    rows = random_ratings()
    for variant in ("ml-1m", "ml-20m"):  # both published layouts, same ratings
        write_ratings(root, variant, rows)
    return [f"dataset.root={root}"]


GENERATORS = {"movielens": write_movielens}
