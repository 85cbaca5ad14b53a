"""``model=alexnet``: torchvision's AlexNet (no weights) with a configurable dropout rate.

The ImageNet variant is torchvision's network as is (it also runs on inputs down to about
64×64). The CIFAR variant makes it fit 32×32 inputs: the 11×11 stride-4 first convolution
becomes a 3×3 stride-1 one (so the three max-pools take 32×32 to 3×3), and the adaptive pool
keeps that 3×3 map instead of stretching it to 6×6, so the first fully connected layer reads
256·3·3 features instead of 256·6·6. Everything else (five convs, 4096-wide classifier with
dropout) is unchanged.
"""

from __future__ import annotations

from torch import Tensor, nn
from torchvision import models

from gradsync.data.spec import DataSpec
from gradsync.models.options import AlexNetConfig
from gradsync.models.variants import in_channels, resolve_variant

CIFAR_POOL = 3  # spatial size of the last feature map for 32×32 inputs in the CIFAR variant
FEATURE_CHANNELS = 256
STEM_CHANNELS = 64


class AlexNet(nn.Module):
    def __init__(
        self,
        *,
        spec: DataSpec,
        dropout: float = AlexNetConfig.dropout,
        variant: str = AlexNetConfig.variant,
    ) -> None:
        super().__init__()
        self.variant = resolve_variant(variant, spec)
        net = models.alexnet(weights=None, num_classes=spec.num_classes, dropout=dropout)
        channels = in_channels(spec)
        if self.variant == "cifar":
            net.features[0] = nn.Conv2d(channels, STEM_CHANNELS, 3, stride=1, padding=1)
            net.avgpool = nn.AdaptiveAvgPool2d(CIFAR_POOL)
            fc = net.classifier[1]  # [Dropout, Linear(256·6·6, 4096), ReLU, Dropout, ...]
            net.classifier[1] = nn.Linear(FEATURE_CHANNELS * CIFAR_POOL**2, fc.out_features)
        elif channels != 3:
            net.features[0] = nn.Conv2d(channels, STEM_CHANNELS, 11, stride=4, padding=2)
        self.net = net

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)
