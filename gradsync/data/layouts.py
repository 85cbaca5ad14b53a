"""Where each file-based dataset's files sit under ``dataset.root``.

Kept free of heavy imports: the config schemas (loaded by the launcher before any worker starts)
check these paths, and the loaders read them.
"""

from __future__ import annotations

# Split name -> path under root. Split names follow the Hugging Face Hub copies of the corpora.
WIKITEXT2_FILES: dict[str, str] = {
    "train": "wikitext-2-raw/wiki.train.raw",
    "validation": "wikitext-2-raw/wiki.valid.raw",
    "test": "wikitext-2-raw/wiki.test.raw",
}
PTB_FILES: dict[str, str] = {
    "train": "ptb/ptb.train.txt",
    "validation": "ptb/ptb.valid.txt",
    "test": "ptb/ptb.test.txt",
}

# MovieLens variant -> ratings file under root, as unpacked from GroupLens' zip archives.
MOVIELENS_RATINGS: dict[str, str] = {
    "ml-1m": "ml-1m/ratings.dat",
    "ml-20m": "ml-20m/ratings.csv",
}
