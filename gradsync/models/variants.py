"""Which stem/head an image model gets: the CIFAR variant (small inputs) or the ImageNet one."""

from __future__ import annotations

from torch import nn

from gradsync.data.spec import DataSpec
from gradsync.models.variant_names import CIFAR_MAX_HEIGHT, VARIANTS


def resolve_variant(variant: str, spec: DataSpec) -> str:
    """``cifar`` or ``imagenet``."""
    if variant not in VARIANTS:
        raise ValueError(f"model.variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if variant != "auto":
        return variant
    return "cifar" if spec.input_shape[1] <= CIFAR_MAX_HEIGHT else "imagenet"


def in_channels(spec: DataSpec) -> int:
    return spec.input_shape[0]


def kaiming_conv(conv: nn.Conv2d) -> nn.Conv2d:
    """The initialization torchvision's ResNet/VGG give their convolutions (so a replaced
    stem starts like the rest of the network)."""
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    if conv.bias is not None:
        nn.init.zeros_(conv.bias)
    return conv
