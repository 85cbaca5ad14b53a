"""The collective of a world of one worker, without a process group.

Every collective is the identity, as it is for a real group of size 1, and nothing goes on the
wire; point-to-point has no peer and refuses. Compressors start bound to it (so they can be used
and tested on their own) until a sync strategy binds them to the real collective.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NoReturn

import torch

from gradsync.comm.collective import ByteCount
from gradsync.types import Payload


def _no_peer() -> NoReturn:
    raise RuntimeError(
        "point-to-point needs another rank: a world of one worker has nobody to talk to "
        "(a parameter server runs beside the workers)"
    )


class SoloCollective:
    rank = 0
    world_size = 1

    def barrier(self) -> None:
        return None  # alone: nobody to wait for

    def fork(self, *, interface: str | None = None) -> SoloCollective:
        # Nothing goes on any wire, so the interface changes nothing.
        return SoloCollective()

    def all_reduce(self, payload: Payload, *, op: str = "sum") -> Payload:
        return payload

    def start_all_reduce(self, payload: Payload, *, op: str = "sum") -> Callable[[], Payload]:
        return lambda: payload

    def all_gather(self, payload: Payload, *, same_shape: bool = False) -> list[Payload]:
        return [payload]

    def broadcast(self, payload: Payload, *, src: int) -> Payload:
        return payload

    def world(self) -> SoloCollective:
        return self

    def send(self, payload: Payload, *, dst: int, tag: int = 0) -> None:
        _no_peer()

    def start_send(self, payload: Payload, *, dst: int, tag: int = 0) -> Callable[[], None]:
        _no_peer()

    def recv(self, payload: Payload, *, src: int | None = None, tag: int = 0) -> int:
        _no_peer()

    def start_recv(self, payload: Payload, *, src: int, tag: int = 0) -> Callable[[], Payload]:
        _no_peer()

    def take_bytes(self) -> ByteCount:
        return ByteCount()

    def reduce_metrics(
        self, values: Sequence[float], *, device: torch.device, op: str = "sum"
    ) -> list[float]:
        return list(values)
