"""Who holds what: the flat parameter vector (model order) cut into one contiguous shard per
server, and the tags that keep pushes and pulls apart on the wire."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch.distributed as dist
from torch import Tensor

PUSH, PULL = 1, 2  # point-to-point tags: gradients to a server, parameters back
CLOCKS = 2  # a pull carries the slowest and the fastest worker's clock after the parameters
STAMPS = CLOCKS + 1
"""What a ps_bsp, asp or ssp pull carries after the parameters: the two clocks, then the
staleness the worker's last gradient was applied with (updates since its previous pull)."""


@dataclass(frozen=True)
class Shards:
    bounds: tuple[int, ...]
    """Server s holds elements ``bounds[s]:bounds[s + 1]`` of the flat parameters."""
    workers: int
    """Ranks 0..workers−1 train; server s is rank ``workers + s``."""

    @classmethod
    def even(cls, total: int, servers: int, workers: int) -> Shards:
        if total < servers:
            raise ValueError(f"{servers} servers cannot share a model of {total} elements")
        return cls(tuple(total * s // servers for s in range(servers + 1)), workers)

    @classmethod
    def of_world(cls, total: int, workers: int) -> Shards:
        """The shards for the servers that the world holds besides ``workers`` workers."""
        return cls.even(total, dist.get_world_size() - workers, workers)

    @property
    def servers(self) -> int:
        return len(self.bounds) - 1

    def slice(self, server: int) -> slice:
        return slice(self.bounds[server], self.bounds[server + 1])

    def rank(self, server: int) -> int:
        return self.workers + server


def shaped(flat: Tensor, like: Sequence[Tensor]) -> list[Tensor]:
    """Views of ``flat`` (tensors of the shapes of ``like``, end to end) shaped as each."""
    pieces = flat.split([t.numel() for t in like])
    return [piece.view_as(t) for piece, t in zip(pieces, like, strict=True)]
