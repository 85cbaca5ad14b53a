"""Tiny WikiText-2 (raw) and PTB corpora in the published file layouts: random words, blank lines
and, for WikiText, `` = Heading = `` lines, as in the real files."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from gradsync.data.layouts import PTB_FILES, WIKITEXT2_FILES

WORDS = [f"w{i}" for i in range(40)]
RARE = "zyzzyva"  # appears in the valid/test files only, so it must become <unk>
LINES = {"train": 300, "validation": 60, "test": 60}


def _sentence(rng: random.Random, split: str) -> str:
    words = rng.choices(WORDS, k=rng.randint(3, 15))
    if split != "train" and rng.random() < 0.2:
        words[rng.randrange(len(words))] = RARE
    return " ".join(words)


def write_wikitext2(root: Path) -> None:
    rng = random.Random(0)
    for split, name in WIKITEXT2_FILES.items():
        lines: list[str] = []
        for i in range(LINES[split]):
            if i % 25 == 0:
                # Real files: " = Title = " (and " = = Section = = "), each between blank lines.
                lines += [" ", f" = Heading {i} = ", " "]
            lines.append(f" {_sentence(rng, split)} ")
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_ptb(root: Path) -> None:
    rng = random.Random(1)
    for split, name in PTB_FILES.items():
        lines: list[str] = []
        for i in range(LINES[split]):
            sentence = _sentence(rng, split)
            if i % 10 == 0:
                sentence += " <unk>"  # PTB's files already mark rare words as <unk>
            lines.append(f" {sentence} ")
            if i % 50 == 0:
                lines.append("")
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _generator(write: Callable[[Path], None]) -> Callable[[Path], list[str]]:
    def generate(root: Path) -> list[str]:
        write(root)
        return [f"dataset.root={root}"]

    return generate


GENERATORS = {"wikitext2": _generator(write_wikitext2), "ptb": _generator(write_ptb)}
