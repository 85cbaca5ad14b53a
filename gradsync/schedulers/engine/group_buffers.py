"""Gradient-sized tensors the engine reuses from step to step, one set per group, with their
per-tensor views made once.

Kept on every device, for two reasons. On a CPU worker a fresh tensor above 32 MB gets fresh
pages every step (glibc maps every allocation that large anew and unmaps it when freed):
flattening ResNet-18's 45 MB gradient took 17.6 ms into a new tensor against 1.9 ms into a
reused one on this project's 2-core machine, and zeroing one 16.5 ms against 1.0. And on any
device, a kept tensor's views shaped as its group's parameters are made once, so a step copies
the gradients in and hands them back without a Python-level view per tensor (each costs a
dispatcher call, and a model has hundreds of tensors).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


class GroupBuffers:
    def __init__(self) -> None:
        self._flats: dict[int, tuple[Tensor, Tensor]] = {}
        self._turns: dict[int, int] = {}
        self._sums: dict[int, Tensor] = {}
        self._scratches: dict[int, Tensor] = {}
        self._turned: set[int] = set()  # groups that took their other buffer this step
        # Where a kept tensor's elements start: the tensor and its views; the tensor alone.
        self._views: dict[int, tuple[Tensor, tuple[Tensor, ...]]] = {}
        self._kept_at: dict[int, Tensor] = {}

    def clear(self) -> None:
        """Forget every buffer (the groups changed)."""
        self._flats, self._turns, self._turned = {}, {}, set()
        self._sums, self._scratches, self._views, self._kept_at = {}, {}, {}, {}

    def settle(self, *, stepped: bool) -> None:
        """The step is over. A skipped one (fp16 overflow) gave the feedback back the residuals
        it had before, which may be the buffers of the step before: the next step flattens
        into the buffers this one did, not into those."""
        if not stepped:
            for group in self._turned:
                self._turns[group] = 1 - self._turns[group]
        self._turned = set()

    def flat(self, group: int, numel: int, like: Tensor) -> Tensor:
        """Where to flatten ``group``'s gradients this step. Two buffers take turns: the error
        feedback may keep last step's flat gradient as its residual
        (``compress_with_feedback(scratch=True)``), which this step still reads."""
        pair = self._flats.get(group)
        # A group's size is fixed until ``clear`` (a new plan): the rest is checked when made.
        if pair is None or pair[0].numel() != numel:
            for old in pair or ():
                self._forget(old)
            made = (self._keep(like.new_empty(numel)), self._keep(like.new_empty(numel)))
            pair = self._flats[group] = made
        turn = self._turns[group] = 1 - self._turns.get(group, 1)
        self._turned.add(group)
        return pair[turn]

    def summed(self, group: int, like: Tensor) -> Tensor:
        """Where to sum (or decompress) ``group``'s exchanged payloads. The gradients written
        back are views of it, dropped before the next step sums again (the loop sets them to
        None after every step)."""
        return self._kept(self._sums, group, like)

    def scratch(self, group: int, like: Tensor) -> Tensor:
        """Where to decompress each gathered payload of ``group`` before adding it up."""
        return self._kept(self._scratches, group, like)

    def for_combine(self, group: int, like: Tensor, *, gathered: bool) -> dict[str, Tensor | None]:
        """``combine``'s ``out`` and ``scratch`` for ``group`` (a scratch only when the
        payloads were gathered, one per worker)."""
        scratch = self.scratch(group, like) if gathered else None
        return {"out": self.summed(group, like), "scratch": scratch}

    def views(
        self, flat: Tensor, sizes: Sequence[int], shapes: Sequence[torch.Size]
    ) -> tuple[Tensor, ...]:
        """``flat`` cut into tensors of ``sizes`` elements shaped as ``shapes``: made once for a
        tensor these buffers keep, made afresh for any other."""
        made = self._views.get(flat.data_ptr())
        if made is not None and made[0].shape == flat.shape:
            return made[1]
        flat = flat.reshape(-1)
        cut = tuple(part.view(shape) for part, shape in zip(flat.split(sizes), shapes, strict=True))
        kept = self._kept_at.get(flat.data_ptr())
        if kept is not None and kept.shape == flat.shape:
            self._views[flat.data_ptr()] = (kept, cut)
        return cut

    def _kept(self, store: dict[int, Tensor], group: int, like: Tensor) -> Tensor:
        kept = store.get(group)
        if kept is None or kept.shape != like.shape:  # dtype and device: fixed until ``clear``
            if kept is not None:
                self._forget(kept)
            kept = store[group] = self._keep(torch.empty_like(like))
        return kept

    def _keep(self, tensor: Tensor) -> Tensor:
        self._kept_at[tensor.data_ptr()] = tensor
        return tensor

    def _forget(self, tensor: Tensor) -> None:
        """Drop a replaced tensor: its address may be given to another tensor once it is freed,
        and views of it must not be handed out for that one."""
        self._kept_at.pop(tensor.data_ptr(), None)
        self._views.pop(tensor.data_ptr(), None)
