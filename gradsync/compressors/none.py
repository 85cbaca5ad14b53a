"""``compressor=none``: the dense baseline; the gradient itself is the payload."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor

from gradsync.types import Collective, Payload


class NoneCompressor:
    allreducible = True
    lossless = True

    def __init__(self) -> None:
        self.density = 1.0

    def bind(self, collective: Collective) -> None:
        return None  # nothing to agree on

    def compress(
        self, grad: Tensor, *, name: str, step: int, sizes: Sequence[int] | None = None
    ) -> tuple[Payload, Any]:
        return (grad,), None

    def decompress(self, payload: Payload, ctx: Any) -> Tensor:
        return payload[0]

    def selected(self, payload: Payload, ctx: Any) -> Tensor | None:
        return None
