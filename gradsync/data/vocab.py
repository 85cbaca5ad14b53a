"""Word-level tokenization and a vocabulary built from a training split."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import torch
from torch import Tensor

EOS = "<eos>"
UNK = "<unk>"


def tokenize(lines: Iterable[str]) -> list[str]:
    """Whitespace tokens with ``<eos>`` closing every non-empty line; blank lines are dropped."""
    tokens: list[str] = []
    for line in lines:
        words = line.split()
        if words:
            tokens.extend(words)
            tokens.append(EOS)
    return tokens


class Vocabulary:
    """Maps words to ids; any word it does not hold maps to ``<unk>``."""

    def __init__(self, words: list[str]) -> None:
        if UNK not in words:
            raise ValueError(f"a vocabulary must contain {UNK}")
        self.words = words
        self.ids = {word: i for i, word in enumerate(words)}
        self.unk_id = self.ids[UNK]

    @classmethod
    def from_tokens(cls, tokens: Iterable[str], *, max_vocab: int | None = None) -> Vocabulary:
        """Most frequent words first (ties by word), so the ids do not depend on hash order.

        ``max_vocab`` caps the size including ``<unk>``, which is appended when the kept words
        lack it (PTB's files already contain it; WikiText-2 raw does not).
        """
        counts = Counter(tokens)
        ordered = sorted(counts, key=lambda word: (-counts[word], word))
        if max_vocab is not None:
            if max_vocab < 2:
                raise ValueError(f"max_vocab must be >= 2 (one word and {UNK}), got {max_vocab}")
            kept = ordered[:max_vocab]
            ordered = kept if UNK in kept else ordered[: max_vocab - 1]
        if UNK not in ordered:
            ordered.append(UNK)
        return cls(ordered)

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, tokens: Iterable[str]) -> Tensor:
        return torch.tensor([self.ids.get(t, self.unk_id) for t in tokens], dtype=torch.int64)
