"""Every model's options (``model=``): the image models (ResNet, ResNet-20, VGG, AlexNet,
CifarNet), the small MLP and CNN, the language models (LSTM, GPT-2) and NCF. Torch-free: the
command line checks them before importing torch; the models are the modules beside this one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gradsync.config.checks import (
    MAX_LAYERS,
    MAX_TOKENS,
    MAX_WIDTH,
    Options,
    Rule,
    option,
)
from gradsync.config.schema import LANGUAGE_MODEL, RECOMMENDATION, TaskBound
from gradsync.models.variant_names import VARIANTS  # torch-free: composing stays fast


@dataclass
class MLPConfig(TaskBound, Options):
    GROUP: ClassVar[str] = "model"
    _target_: str = "gradsync.models.mlp.MLP"
    _partial_: bool = True
    hidden: list[int] = option(
        default_factory=lambda: [128, 64], each=True, at_least=1, limit=MAX_WIDTH
    )
    """Widths of the hidden layers, input to output."""


@dataclass
class CNNConfig(TaskBound, Options):
    GROUP: ClassVar[str] = "model"
    _target_: str = "gradsync.models.cnn.CNN"
    _partial_: bool = True
    channels: list[int] = option(
        default_factory=lambda: [16, 32], each=True, at_least=1, min_entries=1, limit=MAX_WIDTH
    )
    """Output channels of each 3×3 convolution (ReLU after each; one 2×2 max-pool after the
    last)."""
    hidden: int = option(64, at_least=1, limit=MAX_WIDTH)
    """Width of the fully connected layer before the classifier."""


# ---- models -------------------------------------------------------------------------------
@dataclass
class ImageModelConfig(TaskBound, Options):
    GROUP: ClassVar[str] = "model"
    variant: str = "auto"
    """cifar (small-image stem/head), imagenet (torchvision's), auto: cifar up to 64 px high."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda o: o.variant in VARIANTS,
            lambda o: f"model.variant must be one of {', '.join(VARIANTS)}, got {o.variant}",
        ),
    )


@dataclass
class ResNetConfig(ImageModelConfig):
    _target_: str = "gradsync.models.resnet.ResNet"
    _partial_: bool = True
    depth: int = option(18, choices=(18, 34, 50, 101, 152))
    """Layers: 18, 50 or 101 (torchvision's ResNets)."""


@dataclass
class VGGConfig(ImageModelConfig):
    _target_: str = "gradsync.models.vgg.VGG"
    _partial_: bool = True
    depth: int = option(16, choices=(11, 13, 16, 19))
    """Layers: 16 or 19."""
    batch_norm: bool = True
    """Batch normalization after each convolution."""


@dataclass
class AlexNetConfig(ImageModelConfig):
    _target_: str = "gradsync.models.alexnet.AlexNet"
    _partial_: bool = True
    dropout: float = option(0.2, at_least=0, below=1)
    """Dropout probability of the classifier's fully connected layers."""


@dataclass
class ResNet20Config(TaskBound, Options):
    GROUP: ClassVar[str] = "model"
    _target_: str = "gradsync.models.resnet20.ResNet20"
    _partial_: bool = True


@dataclass
class CifarNetConfig(TaskBound, Options):
    GROUP: ClassVar[str] = "model"
    _target_: str = "gradsync.models.cifarnet.CifarNet"
    _partial_: bool = True
    dropout: float = option(0.5, at_least=0, below=1)
    """Dropout probability before the classifier."""


# ---- models -------------------------------------------------------------------------------
@dataclass
class LSTMConfig(TaskBound, Options):
    GROUP: ClassVar[str] = "model"
    TASK: ClassVar[str] = LANGUAGE_MODEL
    _target_: str = "gradsync.models.lstm.LSTMLanguageModel"
    _partial_: bool = True
    embedding_dim: int = option(650, at_least=1, limit=MAX_WIDTH)
    """Size of the word embeddings."""
    hidden_size: int = option(650, at_least=1, limit=MAX_WIDTH)
    """Hidden units of each LSTM layer."""
    num_layers: int = option(2, at_least=1, limit=MAX_LAYERS)
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
    n_layer: int = option(12, at_least=1, limit=MAX_LAYERS)
    """Transformer blocks."""
    n_head: int = option(12, at_least=1, limit=MAX_LAYERS)
    """Attention heads per block."""
    n_embd: int = option(768, at_least=1, limit=MAX_WIDTH)
    """Embedding width."""
    block_size: int = option(1024, at_least=1, limit=MAX_TOKENS)
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


@dataclass
class NCFConfig(TaskBound, Options):
    GROUP: ClassVar[str] = "model"
    TASK: ClassVar[str] = RECOMMENDATION
    _target_: str = "gradsync.models.ncf.NeuMF"
    _partial_: bool = True
    factors: int = option(64, at_least=1, limit=MAX_WIDTH)
    """Size of the GMF user and item embeddings."""
    mlp_layers: list[int] = option(
        default_factory=lambda: [256, 128, 64],
        each=True,
        at_least=1,
        min_entries=1,
        limit=MAX_WIDTH,
    )
    """MLP widths; the first is the concatenated user+item embedding (each half of it)."""
    dropout: float = option(0.5, at_least=0, below=1)
    """Dropout probability of the MLP tower."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda o: o.mlp_layers[0] % 2 == 0,
            lambda o: (
                "model.mlp_layers[0] must be even (split between user and item), "
                f"got {o.mlp_layers[0]}"
            ),
        ),
    )
