"""``dataset=wikitext2`` and ``dataset=ptb``: word-level language-model corpora.

Both are read through the ``datasets`` library, from the published text files under ``root``
(default) or from the Hugging Face Hub (``download=true``, cached under ``root``). They differ
only in file names and Hub names, so one class does the work and two subclasses name the files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor

from gradsync.data.layouts import PTB_FILES, WIKITEXT2_FILES
from gradsync.data.memory import InMemorySplit
from gradsync.data.options import WikiText2Config
from gradsync.data.spec import DataSpec, DataSplits
from gradsync.data.vocab import Vocabulary, tokenize

# User-facing split names -> the names the Hub copies (and our data_files keys) use.
EVAL_SPLITS = {"valid": "validation", "test": "test"}


class TokenWindows(InMemorySplit):
    """Consecutive, non-overlapping windows of a token stream: ``(inputs, targets)``.

    Window i covers tokens ``[i*T, (i+1)*T)`` and its targets are the same span shifted by one;
    a final partial window is dropped. The trainer shuffles windows, so a model sees each as an
    independent sequence (truncated BPTT without carrying state across windows). The stream is
    held whole (on the worker's device in training) and a batch of windows is one gather.
    """

    def __init__(self, stream: Tensor, seq_len: int) -> None:
        if seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}")
        self.stream = stream
        self.seq_len = seq_len

    def __len__(self) -> int:
        # The last window needs one token beyond it for its final target.
        return max(len(self.stream) - 1, 0) // self.seq_len

    @property
    def device(self) -> torch.device:
        return self.stream.device

    def to(self, device: torch.device) -> TokenWindows:
        return self if self.device == device else TokenWindows(self.stream.to(device), self.seq_len)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(index)
        start = index * self.seq_len
        window = self.stream[start : start + self.seq_len + 1]
        return window[:-1], window[1:]

    def batch(self, indices: Tensor, draws: Tensor | None = None) -> tuple[Tensor, Tensor]:
        span = torch.arange(self.seq_len, device=self.stream.device)
        positions = indices[:, None] * self.seq_len + span  # B×T: each window's inputs
        return self.stream.take(positions), self.stream.take(positions + 1)


class WordCorpus:
    """A train/valid/test text corpus, tokenized by whitespace with ``<eos>`` per line."""

    FILES: ClassVar[dict[str, str]] = {}
    """Split name -> file under root, for reading local files."""

    def __init__(
        self,
        *,
        root: str,
        download: bool = WikiText2Config.download,
        seq_len: int = WikiText2Config.seq_len,
        eval_split: str = WikiText2Config.eval_split,
        max_vocab: int | None = None,
        hub_name: str,
        hub_config: str | None = None,
    ) -> None:
        if eval_split not in EVAL_SPLITS:
            raise ValueError(f"eval_split must be one of {', '.join(EVAL_SPLITS)}")
        self.root = Path(root)
        self.download = download
        self.seq_len = seq_len
        self.eval_split = EVAL_SPLITS[eval_split]
        self.max_vocab = max_vocab
        self.hub_name = hub_name
        self.hub_config = hub_config

    def known_spec(self) -> DataSpec | None:
        """With ``max_vocab``, the largest the vocabulary can be; without, only the text says."""
        if self.max_vocab is None:
            return None
        return DataSpec(task="language_model", vocab_size=self.max_vocab, seq_len=self.seq_len)

    def load(self) -> DataSplits:
        lines = self.read_lines(["train", self.eval_split])
        train_tokens = tokenize(lines["train"])
        vocab = Vocabulary.from_tokens(train_tokens, max_vocab=self.max_vocab)
        return DataSplits(
            spec=DataSpec(task="language_model", vocab_size=len(vocab), seq_len=self.seq_len),
            train=TokenWindows(vocab.encode(train_tokens), self.seq_len),
            test=TokenWindows(vocab.encode(tokenize(lines[self.eval_split])), self.seq_len),
        )

    def read_lines(self, splits: list[str]) -> dict[str, Sequence[str]]:
        """The raw lines of each split, from local files or from the Hub."""
        import datasets  # heavy; only workers that load text data pay for it

        datasets.disable_progress_bars()  # workers' stderr is the run's log, not a terminal
        if self.download:
            corpus = datasets.load_dataset(
                self.hub_name, self.hub_config, cache_dir=str(self.root / "hf-cache")
            )
        else:
            files = {split: str(self.root / self.FILES[split]) for split in splits}
            corpus = datasets.load_dataset("text", data_files=files)
        # The text is the only column; its name differs ("text" for WikiText, "sentence" for PTB).
        return {split: corpus[split][corpus[split].column_names[0]] for split in splits}


class WikiText2(WordCorpus):
    FILES = WIKITEXT2_FILES


class PennTreebank(WordCorpus):
    FILES = PTB_FILES
