"""``compressor=none``: the dense baseline; the gradient itself is the payload."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from gradsync.types import Payload


class NoneCompressor:
    allreducible: ClassVar[bool] = True
    lossless: ClassVar[bool] = True

    def __init__(self) -> None:
        self.density = 1.0

    def compress(self, grad: Tensor, *, name: str, step: int) -> tuple[Payload, Any]:
        return (grad,), None

    def decompress(self, payload: Payload, ctx: Any) -> Tensor:
        return payload[0]

    def selected(self, payload: Payload, ctx: Any) -> Tensor | None:
        return None
