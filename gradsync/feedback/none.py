"""``feedback=none``: no memory; what the compressor drops is lost."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from gradsync.types import Compressor, ErrorFeedback


def for_compressor(compressor: Compressor) -> ErrorFeedback:
    return NoneFeedback()


class NoneFeedback:
    remembers = False

    def compensate(self, grad: Tensor, *, name: str, in_place: bool = False) -> Tensor:
        return grad

    def update(self, compensated: Tensor, transmitted: Tensor, *, name: str) -> None:
        return None

    def forget_sent(self, compensated: Tensor, sent: Tensor, *, name: str) -> None:
        return None

    def norm(self) -> Tensor:
        return torch.zeros(())

    def state_dict(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        return None

    def residuals(self) -> dict[str, Tensor]:
        return {}

    def replace_residuals(self, residuals: Mapping[str, Tensor]) -> None:
        return None

    def snapshot(self) -> object:
        return None

    def restore(self, snapshot: object) -> None:
        return None
