"""The order in which the model's gradients become ready, seen by gradient hooks in the first
backward pass. DDP rebuilds its buckets in this order after its first step; a compressor that
draws per tensor from one seed (PowerSGD's initial Q) follows it through ``GroupInfo.ready``, so
that it draws for each tensor what PyTorch's hook draws, whatever order the model declares its
layers in. The hooks come off after the first step: later steps pay nothing."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from gradsync.schedulers.engine.hooks import ModelHooks, hook_model


class ReadyOrder:
    def __init__(self, model: nn.Module, params: Sequence[nn.Parameter]) -> None:
        """``params``: the scheduler's tensors (backward order); indices below are into them."""
        self._seen: dict[int, int] = {}
        self._hooked = hook_model(model, params, ModelHooks(on_gradient=self._on_gradient))

    def _on_gradient(self, tensor: int) -> None:
        self._seen.setdefault(tensor, len(self._seen))

    def stop_once_seen(self) -> None:
        """Before a step: once a backward pass has run, what it showed is the order from now
        on, and the hooks come off."""
        if self._seen:
            self._hooked.remove()

    def of(self, members: Sequence[int]) -> tuple[int, ...]:
        """Positions in ``members`` (tensor indices) in the order their gradients became ready;
        empty (backward order) when one of them got none: DDP rebuilds its buckets only where
        every parameter has a gradient (``find_unused_parameters=False``), and keeps the
        reverse of the declaration order otherwise."""
        if any(member not in self._seen for member in members):
            return ()
        return tuple(sorted(range(len(members)), key=lambda i: self._seen[members[i]]))
