"""``model=cnn``: 3x3 conv layers (ReLU), one 2x2 max-pool, one hidden linear layer."""

from __future__ import annotations

from torch import Tensor, nn

from gradsync.data.spec import DataSpec


class CNN(nn.Module):
    def __init__(self, *, spec: DataSpec, channels: list[int], hidden: int) -> None:
        super().__init__()
        in_channels, height, width = spec.input_shape
        convs: list[nn.Module] = []
        for c_in, c_out in zip([in_channels, *channels[:-1]], channels, strict=True):
            convs += [nn.Conv2d(c_in, c_out, kernel_size=3, padding=1), nn.ReLU()]
        self.features = nn.Sequential(*convs, nn.MaxPool2d(2))
        flat = channels[-1] * (height // 2) * (width // 2)
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(flat, hidden), nn.ReLU(), nn.Linear(hidden, spec.num_classes)
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))
