"""Schemas of the language-model options: models lstm/gpt2, datasets wikitext2/ptb."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gradsync.config.checks import Options, Rule, option
from gradsync.config.schema import FileDatasetConfig, TaskBound
from gradsync.data.layouts import PTB_FILES, WIKITEXT2_FILES

LANGUAGE_MODEL = "language_model"


# ---- models -------------------------------------------------------------------------------
@dataclass
class LSTMConfig(TaskBound, Options):
    GROUP: ClassVar[str] = "model"
    TASK: ClassVar[str] = LANGUAGE_MODEL
    _target_: str = "gradsync.models.lstm.LSTMLanguageModel"
    _partial_: bool = True
    embedding_dim: int = option(650, at_least=1)
    """Size of the word embeddings."""
    hidden_size: int = option(650, at_least=1)
    """Hidden units of each LSTM layer."""
    num_layers: int = option(2, at_least=1)
    """Stacked LSTM layers."""
    dropout: float = option(0.5, at_least=0, below=1)
    """Dropout probability between layers and on the embeddings."""
    tie_weights: bool = True
    """Share the embedding matrix with the decoder (needs embedding_dim == hidden_size)."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda o: not o.tie_weights or o.embedding_dim == o.hidden_size,
            lambda o: (
                "model.tie_weights=true needs model.embedding_dim == model.hidden_size "
                f"(got {o.embedding_dim} and {o.hidden_size}); make them equal or set "
                "model.tie_weights=false"
            ),
        ),
    )


@dataclass
class GPT2Config(TaskBound, Options):
    GROUP: ClassVar[str] = "model"
    TASK: ClassVar[str] = LANGUAGE_MODEL
    _target_: str = "gradsync.models.gpt2.GPT2"
    _partial_: bool = True
    n_layer: int = option(12, at_least=1)
    """Transformer blocks."""
    n_head: int = option(12, at_least=1)
    """Attention heads per block."""
    n_embd: int = option(768, at_least=1)
    """Embedding width."""
    block_size: int = option(1024, at_least=1)
    """Longest input the position embeddings cover (must be >= dataset.seq_len)."""
    dropout: float = option(0.1, at_least=0, below=1)
    """Dropout probability of embeddings, attention and residuals."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda o: o.n_embd % o.n_head == 0,
            lambda o: (
                f"model.n_embd ({o.n_embd}) must be a positive multiple of model.n_head "
                f"({o.n_head})"
            ),
        ),
    )


# ---- datasets -----------------------------------------------------------------------------
@dataclass
class WordCorpusConfig(FileDatasetConfig, Options):
    """Shared by the word-level corpora; subclasses name the files and the Hub copy."""

    GROUP: ClassVar[str] = "dataset"
    TASK: ClassVar[str] = LANGUAGE_MODEL
    FILES: ClassVar[dict[str, str]] = {}
    seq_len: int = option(35, at_least=1)
    """Tokens per training/evaluation window (the BPTT length)."""
    eval_split: str = option("valid", choices=("valid", "test"))
    """Split evaluated during training: valid or test."""
    max_vocab: int | None = option(None, at_least=2, hint="(one word and <unk>)")
    """Keep only the most frequent words, <unk> included (null: every training word)."""
    hub_name: str = ""
    """Hugging Face Hub dataset fetched when dataset.download=true."""
    hub_config: str | None = None
    """Configuration of that Hub dataset (null: its default)."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda o: bool(o.hub_name),
            lambda o: "dataset.hub_name must name a Hugging Face Hub dataset",
        ),
    )

    def required_paths(self) -> list[str]:
        return list(self.FILES.values())


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
