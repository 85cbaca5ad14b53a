"""``model=resnet18|resnet50|resnet101``: torchvision's ResNet definitions, no pretrained weights.

The CIFAR variant (as CIFAR ResNet-18 codebases build it) replaces the 7×7 stride-2 stem and
its max-pool with one 3×3 stride-1 convolution, so 32×32 inputs are not downsampled 4× before
the first stage.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn
from torchvision import models
from torchvision.models import ResNet as TorchResNet

from gradsync.data.spec import DataSpec
from gradsync.models.options import ResNetConfig
from gradsync.models.variants import in_channels, kaiming_conv, resolve_variant

BUILDERS: dict[int, Callable[..., TorchResNet]] = {
    18: models.resnet18,
    34: models.resnet34,
    50: models.resnet50,
    101: models.resnet101,
    152: models.resnet152,
}


class ResNet(nn.Module):
    def __init__(self, *, spec: DataSpec, depth: int, variant: str = ResNetConfig.variant) -> None:
        super().__init__()
        if depth not in BUILDERS:
            raise ValueError(f"model.depth must be one of {sorted(BUILDERS)}, got {depth}")
        self.variant = resolve_variant(variant, spec)
        net = BUILDERS[depth](weights=None, num_classes=spec.num_classes)
        channels = in_channels(spec)
        if self.variant == "cifar":
            net.conv1 = kaiming_conv(nn.Conv2d(channels, 64, 3, stride=1, padding=1, bias=False))
            net.maxpool = nn.Identity()
        elif channels != 3:
            net.conv1 = kaiming_conv(nn.Conv2d(channels, 64, 7, stride=2, padding=3, bias=False))
        self.net = net

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)
