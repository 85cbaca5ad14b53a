"""Schemas of the language-model options: models lstm/gpt2, datasets wikitext2/ptb."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gradsync.config.checks import require
from gradsync.config.schema import FileDatasetConfig, TaskBound
from gradsync.data.layouts import PTB_FILES, WIKITEXT2_FILES

LANGUAGE_MODEL = "language_model"


# ---- models -------------------------------------------------------------------------------
@dataclass
class LSTMConfig(TaskBound):
    TASK: ClassVar[str] = LANGUAGE_MODEL
    _target_: str = "gradsync.models.lstm.LSTMLanguageModel"
    _partial_: bool = True
    embedding_dim: int = 650
    """Size of the word embeddings."""
    hidden_size: int = 650
    """Hidden units of each LSTM layer."""
    num_layers: int = 2
    """Stacked LSTM layers."""
    dropout: float = 0.5
    """Dropout probability between layers and on the embeddings."""
    tie_weights: bool = True
    """Share the embedding matrix with the decoder (needs embedding_dim == hidden_size)."""

    def __post_init__(self) -> None:
        require(self.embedding_dim >= 1, "model.embedding_dim must be >= 1")
        require(self.hidden_size >= 1, "model.hidden_size must be >= 1")
        require(self.num_layers >= 1, f"model.num_layers must be >= 1, got {self.num_layers}")
        require(0 <= self.dropout < 1, f"model.dropout must be in [0, 1), got {self.dropout}")
        require(
            not self.tie_weights or self.embedding_dim == self.hidden_size,
            f"model.tie_weights=true needs model.embedding_dim == model.hidden_size (got "
            f"{self.embedding_dim} and {self.hidden_size}); make them equal or set "
            "model.tie_weights=false",
        )


@dataclass
class GPT2Config(TaskBound):
    TASK: ClassVar[str] = LANGUAGE_MODEL
    _target_: str = "gradsync.models.gpt2.GPT2"
    _partial_: bool = True
    n_layer: int = 12
    """Transformer blocks."""
    n_head: int = 12
    """Attention heads per block."""
    n_embd: int = 768
    """Embedding width."""
    block_size: int = 1024
    """Longest input the position embeddings cover (must be >= dataset.seq_len)."""
    dropout: float = 0.1
    """Dropout probability of embeddings, attention and residuals."""

    def __post_init__(self) -> None:
        require(self.n_layer >= 1, f"model.n_layer must be >= 1, got {self.n_layer}")
        require(self.n_head >= 1, f"model.n_head must be >= 1, got {self.n_head}")
        require(
            self.n_embd >= 1 and self.n_embd % self.n_head == 0,
            f"model.n_embd ({self.n_embd}) must be a positive multiple of model.n_head "
            f"({self.n_head})",
        )
        require(self.block_size >= 1, f"model.block_size must be >= 1, got {self.block_size}")
        require(0 <= self.dropout < 1, f"model.dropout must be in [0, 1), got {self.dropout}")


# ---- datasets -----------------------------------------------------------------------------
@dataclass
class WordCorpusConfig(FileDatasetConfig):
    """Shared by the word-level corpora; subclasses name the files and the Hub copy."""

    TASK: ClassVar[str] = LANGUAGE_MODEL
    FILES: ClassVar[dict[str, str]] = {}
    seq_len: int = 35
    """Tokens per training/evaluation window (the BPTT length)."""
    eval_split: str = "valid"
    """Split evaluated during training: valid or test."""
    max_vocab: int | None = None
    """Keep only the most frequent words, <unk> included (null: every training word)."""
    hub_name: str = ""
    """Hugging Face Hub dataset fetched when dataset.download=true."""
    hub_config: str | None = None
    """Configuration of that Hub dataset (null: its default)."""

    def required_paths(self) -> list[str]:
        return list(self.FILES.values())

    def __post_init__(self) -> None:
        require(self.seq_len >= 1, f"dataset.seq_len must be >= 1, got {self.seq_len}")
        require(
            self.eval_split in ("valid", "test"),
            f"dataset.eval_split must be valid or test, got {self.eval_split}",
        )
        require(
            self.max_vocab is None or self.max_vocab >= 2,
            f"dataset.max_vocab must be >= 2 (one word and <unk>) or null, got {self.max_vocab}",
        )
        require(bool(self.hub_name), "dataset.hub_name must name a Hugging Face Hub dataset")


@dataclass
class WikiText2Config(WordCorpusConfig):
    name: ClassVar[str] = "wikitext2"
    FILES: ClassVar[dict[str, str]] = WIKITEXT2_FILES
    _target_: str = "gradsync.data.text.WikiText2"
    hub_name: str = "wikitext"
    hub_config: str | None = "wikitext-2-raw-v1"


@dataclass
class PTBConfig(WordCorpusConfig):
    name: ClassVar[str] = "ptb"
    FILES: ClassVar[dict[str, str]] = PTB_FILES
    _target_: str = "gradsync.data.text.PennTreebank"
    hub_name: str = "ptb_text_only"
    hub_config: str | None = None


SCHEMAS: dict[str, dict[str, type]] = {
    "model": {"lstm": LSTMConfig, "gpt2": GPT2Config},
    "dataset": {"wikitext2": WikiText2Config, "ptb": PTBConfig},
}
