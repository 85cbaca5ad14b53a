"""``model=vgg16|vgg19``: torchvision's VGG definitions (optionally with batch norm), no weights.

The ImageNet variant is torchvision's network as is. The CIFAR variant keeps torchvision's
convolutional layers (five max-pools take 32×32 to 1×1) but, as CIFAR VGG codebases do,
replaces the 7×7 adaptive pool and the 4096-wide classifier with a global average pool and one
Linear(512, classes). Inputs must be at least 32 pixels high and wide.
"""

from __future__ import annotations

from collections import OrderedDict

from torch import Tensor, nn
from torchvision.models import vgg

from gradsync.data.spec import DataSpec
from gradsync.models.options import VGGConfig
from gradsync.models.variants import in_channels, kaiming_conv, resolve_variant

# torchvision's names of the layer configurations (vgg.cfgs) per depth.
CONFIGS = {11: "A", 13: "B", 16: "D", 19: "E"}
FEATURE_CHANNELS = 512  # channels of the last conv layer in every VGG configuration


def cifar_vgg(depth: int, batch_norm: bool, num_classes: int) -> nn.Sequential:
    # Built from torchvision's layer list rather than vgg16(...) so the 120M-parameter ImageNet
    # classifier is never allocated only to be thrown away.
    features = vgg.make_layers(vgg.cfgs[CONFIGS[depth]], batch_norm=batch_norm)
    for layer in features:
        if isinstance(layer, nn.Conv2d):
            kaiming_conv(layer)  # what torchvision's VGG.__init__ does to its convs
    head = nn.Linear(FEATURE_CHANNELS, num_classes)
    nn.init.normal_(head.weight, 0, 0.01)  # ... and to its linear layers
    nn.init.zeros_(head.bias)
    return nn.Sequential(
        OrderedDict(
            features=features,
            avgpool=nn.AdaptiveAvgPool2d(1),
            flatten=nn.Flatten(),
            classifier=head,
        )
    )


def imagenet_vgg(depth: int, batch_norm: bool, num_classes: int) -> nn.Module:
    name = f"vgg{depth}_bn" if batch_norm else f"vgg{depth}"
    return getattr(vgg, name)(weights=None, num_classes=num_classes)


class VGG(nn.Module):
    def __init__(
        self,
        *,
        spec: DataSpec,
        depth: int,
        batch_norm: bool = VGGConfig.batch_norm,
        variant: str = VGGConfig.variant,
    ) -> None:
        super().__init__()
        if depth not in CONFIGS:
            raise ValueError(f"model.depth must be one of {sorted(CONFIGS)}, got {depth}")
        self.variant = resolve_variant(variant, spec)
        build = cifar_vgg if self.variant == "cifar" else imagenet_vgg
        net = build(depth, batch_norm, spec.num_classes)
        if in_channels(spec) != 3:
            features = net.features
            assert isinstance(features, nn.Sequential)  # both variants' conv layers
            first = features[0]
            assert isinstance(first, nn.Conv2d)
            features[0] = kaiming_conv(
                nn.Conv2d(in_channels(spec), first.out_channels, 3, padding=1)
            )
        self.net = net

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)
