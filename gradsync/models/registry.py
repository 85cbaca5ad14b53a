"""Every ``model=`` option, once: its name and its options class. The option's YAML file in
``conf/model/`` starts from the class (``/schema/model/<name>``) and sets what differs from its
defaults (a ResNet's depth). Torch-free."""

from __future__ import annotations

from collections.abc import Mapping

from gradsync.models.options import (
    AlexNetConfig,
    CifarNetConfig,
    CNNConfig,
    GPT2Config,
    LSTMConfig,
    MLPConfig,
    NCFConfig,
    ResNet20Config,
    ResNetConfig,
    VGGConfig,
)

MODELS: Mapping[str, type] = {
    "mlp": MLPConfig,
    "cnn": CNNConfig,
    "resnet18": ResNetConfig,
    "resnet50": ResNetConfig,
    "resnet101": ResNetConfig,
    "resnet20": ResNet20Config,
    "vgg16": VGGConfig,
    "vgg19": VGGConfig,
    "alexnet": AlexNetConfig,
    "cifarnet": CifarNetConfig,
    "lstm": LSTMConfig,
    "gpt2": GPT2Config,
    "ncf": NCFConfig,
}
