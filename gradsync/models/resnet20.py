"""``model=resnet20``: the CIFAR ResNet-20 of He et al. 2016 (Sec. 4.2), about 0.27M parameters.

A 3×3 conv with 16 channels, then three stages of three basic blocks with 16, 32 and 64
channels (the second and third stage halve the resolution), global average pooling and a
linear classifier. Shortcuts are the paper's option A: identity, subsampled and zero-padded
in channels where the shape changes, so they add no parameters.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from gradsync.data.spec import DataSpec
from gradsync.models.variants import in_channels

STAGE_CHANNELS = (16, 32, 64)
BLOCKS_PER_STAGE = 3  # n in the paper: depth = 6n + 2 = 20


def conv_bn(c_in: int, c_out: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(c_out)
    )


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(conv_bn(c_in, c_out, stride), nn.ReLU(), conv_bn(c_out, c_out, 1))
        self.stride = stride
        self.extra_channels = c_out - c_in

    def shortcut(self, x: Tensor) -> Tensor:
        if self.stride > 1:
            x = x[:, :, :: self.stride, :: self.stride]
        if self.extra_channels > 0:  # option A: zero-pad the new channels, half on each side
            half = self.extra_channels // 2
            x = F.pad(x, (0, 0, 0, 0, half, self.extra_channels - half))
        return x

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.body(x) + self.shortcut(x))


class ResNet20(nn.Module):
    def __init__(self, *, spec: DataSpec) -> None:
        super().__init__()
        layers: list[nn.Module] = [conv_bn(in_channels(spec), STAGE_CHANNELS[0], 1), nn.ReLU()]
        c_in = STAGE_CHANNELS[0]
        for stage, c_out in enumerate(STAGE_CHANNELS):
            for block in range(BLOCKS_PER_STAGE):
                stride = 2 if stage > 0 and block == 0 else 1
                layers.append(BasicBlock(c_in, c_out, stride))
                c_in = c_out
        self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.classifier = nn.Linear(c_in, spec.num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d | nn.Linear):
                nn.init.kaiming_normal_(module.weight)  # He et al. 2015 initialization

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))
