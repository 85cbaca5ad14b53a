"""Gradient-sized tensors the engine reuses from step to step, one set per group.

On a CPU worker a fresh tensor above 32 MB gets fresh pages every step (glibc maps every
allocation that large anew and unmaps it when freed): flattening ResNet-18's 45 MB gradient
took 17.6 ms into a new tensor against 1.9 ms into a reused one on this project's 2-core
machine, and zeroing one 16.5 ms against 1.0. CUDA's caching allocator already reuses freed
blocks, so on a GPU nothing is kept: the buffers would only hold memory.
"""

from __future__ import annotations

import torch
from torch import Tensor


class GroupBuffers:
    def __init__(self) -> None:
        self._flats: dict[int, tuple[Tensor, Tensor]] = {}
        self._turns: dict[int, int] = {}
        self._sums: dict[int, Tensor] = {}
        self._scratches: dict[int, Tensor] = {}
        self._turned: set[int] = set()  # groups that took their other buffer this step

    def clear(self) -> None:
        """Forget every buffer (the groups changed)."""
        self._flats, self._turns, self._turned = {}, {}, set()
        self._sums, self._scratches = {}, {}

    def settle(self, *, stepped: bool) -> None:
        """The step is over. A skipped one (fp16 overflow) gave the feedback back the residuals
        it had before, which may be the buffers of the step before: the next step flattens
        into the buffers this one did, not into those."""
        if not stepped:
            for group in self._turned:
                self._turns[group] = 1 - self._turns[group]
        self._turned = set()

    def flat(self, group: int, numel: int, like: Tensor) -> Tensor | None:
        """Where to flatten ``group``'s gradients this step; None: into a new tensor. Two
        buffers take turns: the error feedback may keep last step's flat gradient as its
        residual (``compress_with_feedback(scratch=True)``), which this step still reads."""
        if like.device.type != "cpu":
            return None
        pair = self._flats.get(group)
        if pair is None or pair[0].numel() != numel or pair[0].dtype != like.dtype:
            pair = self._flats[group] = (like.new_empty(numel), like.new_empty(numel))
        turn = self._turns[group] = 1 - self._turns.get(group, 1)
        self._turned.add(group)
        return pair[turn]

    def summed(self, group: int, like: Tensor) -> Tensor | None:
        """Where to sum (or decompress) ``group``'s exchanged payloads; None: into a new
        tensor. The gradients written back are views of it, dropped before the next step sums
        again (the loop sets them to None after every step)."""
        return self._kept(self._sums, group, like)

    def scratch(self, group: int, like: Tensor) -> Tensor | None:
        """Where to decompress each gathered payload of ``group`` before adding it up."""
        return self._kept(self._scratches, group, like)

    def for_combine(self, group: int, like: Tensor, *, gathered: bool) -> dict[str, Tensor | None]:
        """``combine``'s ``out`` and ``scratch`` for ``group`` (a scratch only when the
        payloads were gathered, one per worker)."""
        scratch = self.scratch(group, like) if gathered else None
        return {"out": self.summed(group, like), "scratch": scratch}

    @staticmethod
    def _kept(store: dict[int, Tensor], group: int, like: Tensor) -> Tensor | None:
        if like.device.type != "cpu":
            return None
        kept = store.get(group)
        if kept is None or kept.shape != like.shape or kept.dtype != like.dtype:
            kept = store[group] = torch.empty_like(like)
        return kept
