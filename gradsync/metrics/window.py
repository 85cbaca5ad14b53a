"""Per-step measurements kept over a log window, then averaged over steps and workers."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import SupportsFloat

import torch
from torch import Tensor

from gradsync.types import Metric


class MetricsWindow:
    """Accumulates per-step values; ``means()`` returns their averages and resets. Values may
    be 0-d tensors still on their device, read together once a window is read, or anything
    else ``float()`` reads then (a step timer's spans between CUDA events)."""

    def __init__(self) -> None:
        self._values: dict[str, list[SupportsFloat]] = defaultdict(list)
        self._steps = 0

    def add(self, values: Mapping[str, Metric | SupportsFloat]) -> None:
        for key, value in values.items():
            self._values[key].append(value)
        self._steps += 1

    @property
    def steps(self) -> int:
        return self._steps

    def series(self, key: str) -> list[float]:
        """This window's per-step values of ``key``, oldest first."""
        self._read()
        return [float(v) for v in self._values.get(key, [])]

    def means(self) -> dict[str, float]:
        self._read()
        means = {k: sum(float(x) for x in v) / len(v) for k, v in self._values.items() if v}
        self._values = defaultdict(list)
        self._steps = 0
        return means

    def _read(self) -> None:
        """Replace every tensor by its value: one copy to the host per device."""
        places = [
            (key, i, value)
            for key, values in self._values.items()
            for i, value in enumerate(values)
            if isinstance(value, Tensor)
        ]
        devices = {value.device for _, _, value in places}
        for device in devices:
            here = [(key, i, value) for key, i, value in places if value.device == device]
            read = torch.stack([value.detach().reshape(()).double() for _, _, value in here])
            for (key, i, _), number in zip(here, read.tolist(), strict=True):
                self._values[key][i] = number
