"""``compressor=dgc``: Deep Gradient Compression (Lin et al., ICLR 2018).

Per worker, per step, on the flat group ``g`` (elementwise):

1. local gradient clipping (§3.3): g ← g·min(1, c/‖G‖₂) with c = clip_norm·N^(-1/2) for N
   workers, before g joins the accumulation, where G is the worker's whole gradient: one norm
   over every tensor, whatever the groups (``whole_clip.py``).
2. momentum correction (§3.2): u ← m·u + g;  v ← v + u.
3. selection (Algorithm 1): in every tensor j of the group, the top k_j = max(1,
   int(density·n_j)) of |v_j| at this epoch's density (``selection=per_tensor``, the paper's
   per-layer threshold; exact top-k, where the paper estimates the threshold from a sample),
   or the top-k of the whole group (``selection=group``); exchanged as ``compressor.exchange``
   says; the values sent are v's.
4. momentum factor masking (§3.3): u and v are zeroed wherever v was sent.

The optimizer then applies the workers' averaged sparse v with momentum 0: DGC's momentum
(``momentum``) replaces the optimizer's. u and v are this compressor's state: it is its own
error feedback, so ``feedback=auto`` gives none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from typing_extensions import Unpack

from gradsync.compressors.choices import DGC_SELECTIONS
from gradsync.compressors.exchange import ExchangedSparsifier
from gradsync.compressors.fused import fused
from gradsync.compressors.options.sparsifiers import DGCConfig
from gradsync.compressors.selection import per_tensor_topk_indices, topk_indices
from gradsync.compressors.sparse import density_k
from gradsync.compressors.warmup import WarmupArgs
from gradsync.compressors.whole_clip import WholeGradientClip
from gradsync.feedback.residual import memory_norm
from gradsync.types import GroupInfo, Payload, TensorPart

CLIP_KEY = "clip/previous_squares"
"""The previous step's whole-gradient sum of squares, saved so a resumed run clips as the
uninterrupted one."""


@fused
def accumulate(u: Tensor, v: Tensor, grad: Tensor, momentum: float, scale: Tensor | None) -> None:
    """Momentum correction in place: u ← m·u + scale·grad; v ← v + u (one kernel on a GPU)."""
    u.mul_(momentum)
    if scale is None:
        u.add_(grad)
    else:
        u.addcmul_(grad, scale)
    v.add_(u)


@dataclass
class _Memory:
    u: Tensor
    """Velocity: the momentum-corrected gradient's running sum, u ← m·u + g."""
    v: Tensor
    """Accumulated velocity not yet sent, v ← v + u."""
    parts: tuple[TensorPart, ...] | None
    """The group's tensors (None: restored from a checkpoint, not yet seen)."""


PieceKey = tuple[int, int, int | None]


@dataclass(frozen=True)
class _Snapshot:
    memory: dict[str, _Memory]
    loose: dict[PieceKey, tuple[Tensor, Tensor]]
    """Loose pieces are never written in place (a group assembles copies of them)."""
    clip: Tensor | None


def _key(part: TensorPart) -> PieceKey:
    return (part.index, part.start, part.stop)


class DGCCompressor(ExchangedSparsifier):
    same_count = True  # k follows from the group's size and the epoch
    sends_selected_values = False  # it sends the accumulated v, not the gradient it is given
    error_feedback = False  # v keeps what was not sent: a residual on top would keep it twice

    def __init__(
        self,
        *,
        density: float,
        momentum: float = 0.9,
        clip_norm: float | None = None,
        exchange: str = DGCConfig.exchange,
        selection: str = DGCConfig.selection,
        **warmup: Unpack[WarmupArgs],
    ) -> None:
        super().__init__(density=density, exchange=exchange, **warmup)
        self.momentum = momentum
        self.clip_norm = clip_norm
        if selection not in DGC_SELECTIONS:
            valid = ", ".join(DGC_SELECTIONS)
            raise ValueError(f"unknown selection {selection!r}; valid: {valid}")
        self.per_tensor = selection == "per_tensor"
        self._clip = WholeGradientClip()
        self._memory: dict[str, _Memory] = {}
        self._loose: dict[PieceKey, tuple[Tensor, Tensor]] = {}
        """u and v of tensors whose group changed (a scheduler re-planned its groups), until
        their new group takes them."""

    def compress(self, grad: Tensor, *, group: GroupInfo) -> tuple[Payload, Any]:
        flat = grad.reshape(-1)
        memory = self._memory_of(group, flat)
        scale = None
        if self.clip_norm is not None:
            # The paper's N^(-1/2): this worker's share of a global threshold.
            max_norm = self.clip_norm / math.sqrt(self.collective.world_size)
            scale = self._clip.coefficient(flat, group, max_norm)
        accumulate(memory.u, memory.v, flat, self.momentum, scale)
        indices = self._select(memory.v, group)
        # The payload holds copies of v's values, so masking below leaves it as sent.
        payload, ctx = self.exchange.pack(
            memory.v, indices, grad.shape, self.collective, same_count=True
        )
        sent = self.exchange.sent(indices, payload, ctx)
        memory.u.index_fill_(0, sent, 0)
        memory.v.index_fill_(0, sent, 0)
        return payload, ctx

    def _select(self, v: Tensor, group: GroupInfo) -> Tensor:
        density = self.density_at(group.epoch)
        sizes = group.sizes
        if self.per_tensor and sizes is not None and len(sizes) > 1:
            return per_tensor_topk_indices(v, sizes, density)
        return topk_indices(v, density_k(density, v.numel()))

    # ---- memory per group ------------------------------------------------------------------
    def _memory_of(self, group: GroupInfo, flat: Tensor) -> _Memory:
        memory = self._memory.get(group.name)
        parts = group.parts or None
        if memory is not None and memory.u.numel() == flat.numel():
            if memory.u.device != flat.device:  # restored from a checkpoint on the CPU
                memory.u, memory.v = memory.u.to(flat.device), memory.v.to(flat.device)
            if memory.parts is None or parts is None or memory.parts == parts:
                memory.parts = parts or memory.parts
                return memory
        if memory is not None:  # the groups changed: every group's memory is taken apart
            self._loosen()
        memory = self._assemble(parts, flat)
        self._memory[group.name] = memory
        return memory

    def _loosen(self) -> None:
        for memory in self._memory.values():
            if memory.parts is None:
                continue  # no known tensors to carry it to
            sizes = [part.numel for part in memory.parts]
            pieces = zip(memory.u.split(sizes), memory.v.split(sizes), strict=True)
            for part, (u, v) in zip(memory.parts, pieces, strict=True):
                self._loose[_key(part)] = (u, v)
        self._memory.clear()

    def _assemble(self, parts: tuple[TensorPart, ...] | None, flat: Tensor) -> _Memory:
        """A group's memory from the loose pieces of its tensors (zeros where none)."""
        if parts is None or not self._loose:
            return _Memory(torch.zeros_like(flat), torch.zeros_like(flat), parts)
        us, vs = [], []
        for part in parts:
            zeros = flat.new_zeros(part.numel)
            u, v = self._loose.pop(_key(part), (zeros, zeros))
            us.append(u.to(flat.device))
            vs.append(v.to(flat.device))
        return _Memory(torch.cat(us), torch.cat(vs), parts)

    def memory_norm(self) -> Tensor:
        """The norm of v: what DGC has accumulated and not sent, its error memory."""
        return memory_norm(memory.v for memory in self._memory.values())

    # ---- an fp16 step that every worker skips: the memory back as it was ---------------------
    def snapshot(self) -> object:
        """u and v copied on their device (they change in place as steps accumulate), with
        the tensors each group holds and the pieces a re-plan left loose, so a step after the
        restore may still re-plan; the clipping's previous norm."""
        memory = {
            name: _Memory(m.u.detach().clone(), m.v.detach().clone(), m.parts)
            for name, m in self._memory.items()
        }
        return _Snapshot(memory, dict(self._loose), self._clip.state())

    def restore(self, snapshot: object) -> None:
        assert isinstance(snapshot, _Snapshot)
        self._memory, self._loose = dict(snapshot.memory), dict(snapshot.loose)
        self._clip.restore(snapshot.clip)

    # ---- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for name, memory in self._memory.items():
            state[f"u/{name}"] = memory.u.detach().to("cpu", copy=True)
            state[f"v/{name}"] = memory.v.detach().to("cpu", copy=True)
        previous = self._clip.state()
        if previous is not None:
            state[CLIP_KEY] = previous.detach().to("cpu", copy=True)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        foreign = sorted(key for key in state if not key.startswith(("u/", "v/", CLIP_KEY)))
        if foreign:
            raise ValueError(
                f"DGCCompressor keeps u/ and v/ per group and {CLIP_KEY}, the checkpoint has "
                f"{foreign}"
            )
        previous = state.get(CLIP_KEY)
        self._clip.restore(None if previous is None else previous.clone())
        names = {key[2:] for key in state if key != CLIP_KEY}
        self._memory = {
            name: _Memory(state[f"u/{name}"].clone(), state[f"v/{name}"].clone(), None)
            for name in names
        }
        self._loose = {}
