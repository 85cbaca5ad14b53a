"""``model=mlp``: a fully connected net on flattened inputs."""

from __future__ import annotations

import itertools
import math

from torch import Tensor, nn

from gradsync.data.spec import DataSpec


class MLP(nn.Module):
    def __init__(self, *, spec: DataSpec, hidden: list[int]) -> None:
        super().__init__()
        sizes = [math.prod(spec.input_shape), *hidden]
        layers: list[nn.Module] = [nn.Flatten()]
        for fan_in, fan_out in itertools.pairwise(sizes):
            layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
        layers.append(nn.Linear(sizes[-1], spec.num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)
