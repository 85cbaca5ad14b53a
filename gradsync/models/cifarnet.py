"""``model=cifarnet``: the small CIFAR-10 network TernGrad trained (TF-slim's CifarNet).

conv 5×5 64 → max-pool 3×3/2 → LRN → conv 5×5 64 → LRN → max-pool 3×3/2 → fc 384 → fc 192 →
classes, ReLU after every conv and hidden fc. As in TF-slim, dropout (p=``dropout``, 0 turns
it off) sits between fc 384 and fc 192. Pools use TF's 'SAME' padding (32 → 16 → 8).
"""

from __future__ import annotations

import math

from torch import Tensor, nn

from gradsync.data.spec import DataSpec
from gradsync.models.options import CifarNetConfig
from gradsync.models.variants import in_channels

CONV_CHANNELS = 64
HIDDEN = (384, 192)


def lrn() -> nn.LocalResponseNorm:
    # tf.nn.lrn(depth_radius=4, bias=1, alpha=0.001/9, beta=0.75) sums over 2·4+1 = 9 channels
    # and scales the sum by alpha; torch scales by alpha/size, hence alpha·9 = 0.001 here.
    return nn.LocalResponseNorm(size=9, alpha=0.001, beta=0.75, k=1.0)


def same_pool() -> nn.MaxPool2d:
    return nn.MaxPool2d(3, stride=2, padding=1)


class CifarNet(nn.Module):
    def __init__(self, *, spec: DataSpec, dropout: float = CifarNetConfig.dropout) -> None:
        super().__init__()
        _, height, width = spec.input_shape
        self.features = nn.Sequential(
            nn.Conv2d(in_channels(spec), CONV_CHANNELS, 5, padding=2),
            nn.ReLU(),
            same_pool(),
            lrn(),
            nn.Conv2d(CONV_CHANNELS, CONV_CHANNELS, 5, padding=2),
            nn.ReLU(),
            lrn(),
            same_pool(),
            nn.Flatten(),
        )
        # Two stride-2 'SAME' pools: ceil(size / 2) twice.
        flat = CONV_CHANNELS * math.ceil(height / 4) * math.ceil(width / 4)
        self.classifier = nn.Sequential(
            nn.Linear(flat, HIDDEN[0]),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(HIDDEN[0], HIDDEN[1]),
            nn.ReLU(),
            nn.Linear(HIDDEN[1], spec.num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))
