"""``compressor=powersgd``: rank-r PowerSGD (Vogels et al., NeurIPS 2019), as PyTorch's
``powerSGD_hook`` runs it on a DDP bucket, here on a scheduler's group of whole tensors.

Before ``start_step`` the group travels dense. From then on, every tensor is viewed as a matrix
M of ``shape[0]`` rows (a convolution kernel's other dimensions flattened into columns) and is
compressed when ``(rows + cols)·r·min_compression_rate < rows·cols``; vectors, small tensors and
slices of tensors (a bucket that cuts one) travel as they are. For the compressed ones:

1. Q (cols × r) is last step's, orthogonalized (warm start); the first time it is drawn from
   N(0, 1) with a seed every worker draws alike, and orthogonalized.
2. P = M·Q is all-reduced (summed) inside ``compress``, the first of PowerSGD's two rounds,
   and orthogonalized.
3. Q = Mᵀ·P is the payload, in one tensor after the uncompressed tensors: the scheduler's
   all-reduce sums them, the second round (the hook sends the uncompressed tensors in a round
   of their own, before P).
4. ``decompress`` rebuilds P·(ΣQ/n)ᵀ, the mean rank-r approximation, and the mean of the
   uncompressed tensors.

Error feedback is the method's own (PowerSGD's memory needs what the exchange returned, which
the shared feedback never sees): the next step's gradient is compensated with this step's
compensated gradient less the mean that was applied, over the whole group as the hook keeps
it (the uncompressed tensors' share is their local value less the workers' mean). The step's
context records what the next step needs (its error, the mean Q) when it is decompressed; the
next ``compress`` of the group, or ``state_dict``, takes it over.

The matrices of one shape are worked on as one batch (``powersgd_batches``), as the hook's
``batch_tensors_with_same_shape`` does: one ``bmm`` per shape for M·Q, Mᵀ·P and P·Qᵀ, one
orthogonalization per shape, so that a step's operations grow with the distinct shapes, not with
the tensors. The random draws of Q stay one per matrix, as the hook's default (unbatched) draws
are, so that a seed draws the same Q's as it does.

What differs from the hook: there are two rounds instead of three (the same sums, one start-up
less); and ``decompress`` returns the workers' sum, as every compressor does for the schedulers
that average after they combine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from gradsync.comm.solo import SoloCollective
from gradsync.compressors.device_copy import on_device
from gradsync.compressors.options.powersgd import PowerSGDConfig
from gradsync.compressors.powersgd_batches import Batches, Matrix, Stacked, bmm
from gradsync.compressors.warmup import DensitySchedule
from gradsync.feedback.residual import memory_norm
from gradsync.types import Collective, GroupInfo, Payload, TensorPart

SEED_RANGE = 1_000_000_000  # the hook's: each new group's Q is drawn from seed in [0, this)


@dataclass(frozen=True)
class Layout:
    """How one group's tensors travel, decided once from their shapes."""

    matrices: tuple[Matrix, ...]
    """Compressed, in the order their P and Q lie in the flat P and Q: grouped by shape, in
    order of each shape's first tensor (as the hook lays them out)."""
    uncompressed: tuple[tuple[int, int], ...]
    """(offset, elements) of the tensors sent as they are, in the group's order."""
    batches: Batches = field(init=False, repr=False, compare=False)
    """The matrices by shape, and the indices that gather and put them back."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "batches", Batches(self.matrices, self.uncompressed))

    @property
    def p_numel(self) -> int:
        return self.batches.p_numel

    @property
    def q_numel(self) -> int:
        return self.batches.q_numel

    @property
    def uncompressed_numel(self) -> int:
        return self.batches.uncompressed_numel


@dataclass
class PowerCtx:
    """One step of one group on this worker."""

    layout: Layout | None
    """None: the group travelled dense (before ``start_step``)."""
    ps: list[Tensor] = field(default_factory=list)
    """Each shape's all-reduced, orthogonalized P (views of the flat P)."""
    stacked: Stacked | None = None
    """The compensated matrices by shape; ``decompress`` writes the approximations over them."""
    compensated: Tensor | None = None
    """The step's compensated gradient (a copy), turned into its error by ``decompress``."""
    error: Tensor | None = None
    """What the next step adds to its gradient, once decompressed."""
    mean_q: Tensor | None = None
    """The workers' mean Q, the next step's warm start, once decompressed."""
    shape: torch.Size = field(default_factory=torch.Size)


@dataclass
class Spare:
    """Buffers of a group that its last decompressed step is done with, for its next step (on a
    CPU a new buffer of a gradient's size costs a pass of page faults)."""

    stacked: Stacked | None = None
    compensated: Tensor | None = None
    """The error before the last, which the next compensated gradient may overwrite."""


def should_compress(rows: int, cols: int, rank: int, min_compression_rate: float) -> bool:
    """Worth sending as rank-``rank`` factors: they are ``min_compression_rate`` times smaller."""
    return (rows + cols) * rank * min_compression_rate < rows * cols


def layout_of(
    parts: tuple[TensorPart, ...],
    rank: int,
    min_compression_rate: float,
    ready: tuple[int, ...] = (),
) -> Layout:
    """``parts`` (in the group's order, the model's) laid out. The matrices are taken in the
    order the gradients became ready (``GroupInfo.ready``; backward order when unknown), as
    DDP's buckets hold them after their first step, so that one seed draws the same Q for each
    tensor as PyTorch's hook does, whatever order the model declares its layers in."""
    offsets = [0]
    for part in parts:
        offsets.append(offsets[-1] + part.numel)
    if ready and sorted(ready) != list(range(len(parts))):
        raise ValueError(f"ready order {ready} is not an order of the group's {len(parts)} parts")
    order = ready or tuple(reversed(range(len(parts))))
    by_shape: dict[tuple[int, int], list[Matrix]] = {}
    uncompressed = []
    for part, offset in ((parts[i], offsets[i]) for i in order):
        rows = part.shape[0] if part.whole and len(part.shape) >= 1 else 0
        cols = part.numel // rows if rows else 0
        kept = min(rows, cols, rank)
        if rows and should_compress(rows, cols, kept, min_compression_rate):
            by_shape.setdefault((rows, cols), []).append(Matrix(offset, rows, cols, kept))
        else:
            uncompressed.append((offset, part.numel))
    matrices = tuple(m for same in by_shape.values() for m in same)
    return Layout(matrices, tuple(sorted(uncompressed)))


def orthogonalize(matrices: Tensor, epsilon: float = 0.0) -> None:
    """Orthonormal columns for each of ``matrices`` (batch × rows × r), in place: Gram-Schmidt
    for r <= 2 or a half-precision type, else QR's Q (the hook's choice; the same columns up to
    rounding). Each matrix of the batch comes out as it would alone."""
    rank = matrices.shape[2]
    if rank > 2 and matrices.dtype not in (torch.float16, torch.bfloat16):
        matrices.copy_(torch.linalg.qr(matrices).Q)
        return
    for i in range(rank):
        column = matrices if rank == 1 else matrices[:, :, i : i + 1]
        norm = torch.linalg.vector_norm(column, dim=1, keepdim=True)
        column /= norm + epsilon if epsilon else norm  # adding 0 changes no norm
        if i + 1 < rank:  # take this column's direction out of the ones after it
            later = matrices[:, :, i + 1 :]
            later -= torch.sum(column * later, dim=1, keepdim=True) * column


class PowerSGDCompressor(DensitySchedule):
    allreducible = True  # P and Q are sums of every worker's; so are uncompressed tensors
    lossless = False
    error_feedback = False  # it keeps its own memory, which needs the exchange's result
    density = 1.0  # every element is approximated; the bytes show the compression
    payload_same_shape = True
    sends_selected_values = False
    selects_alone = False
    host_syncs: ClassVar[Mapping[str, str]] = {}

    def __init__(
        self,
        *,
        rank: int = PowerSGDConfig.rank,
        start_step: int = PowerSGDConfig.start_step,
        min_compression_rate: float = PowerSGDConfig.min_compression_rate,
        use_error_feedback: bool = PowerSGDConfig.use_error_feedback,
        warm_start: bool = PowerSGDConfig.warm_start,
        orthogonalization_epsilon: float = PowerSGDConfig.orthogonalization_epsilon,
        seed: int = 0,
    ) -> None:
        self.rank = rank
        self.start_step = start_step
        self.steady_step = start_step
        self.min_compression_rate = min_compression_rate
        self.use_error_feedback = use_error_feedback
        self.warm_start = warm_start
        self.orthogonalization_epsilon = orthogonalization_epsilon
        self.seed = seed
        self.collective: Collective = SoloCollective()
        self._layouts: dict[tuple[str, tuple[TensorPart, ...], tuple[int, ...]], Layout] = {}
        self._errors: dict[str, Tensor] = {}
        self._mean_q: dict[str, Tensor] = {}
        self._last: dict[str, PowerCtx] = {}
        self._spares: dict[str, Spare] = {}
        self._parts: dict[str, tuple[TensorPart, ...]] = {}
        """The tensors each group's memory belongs to."""
        self._seeds = np.random.RandomState(seed)

    def bind(self, collective: Collective) -> None:
        self.collective = collective

    # ---- one step ------------------------------------------------------------------------------
    def compress(self, grad: Tensor, *, group: GroupInfo) -> tuple[Payload, PowerCtx]:
        flat = grad.reshape(-1)
        if group.step < self.start_step:
            return (flat,), PowerCtx(layout=None, shape=grad.shape)
        self._take_over(group.name)
        parts = group.parts or (TensorPart(0, (flat.numel(),)),)
        self._forget_if_regrouped(group.name, parts)
        layout = self._layout(group.name, parts, group.ready if group.parts else ())
        batches = layout.batches
        spare = self._spares.pop(group.name, Spare())
        compensated = self._compensated(group.name, flat, spare.compensated)
        qs = self._start_q(group.name, layout, flat)
        stacked = spare.stacked
        if stacked is None or not stacked.fits(batches, flat):
            stacked = batches.stacked(flat)
        batches.gather_matrices(compensated, into=stacked)
        p = flat.new_empty(layout.p_numel)
        ps = batches.ps(p)
        for matrix, p_i, q_i in zip(stacked.matrices, ps, qs, strict=True):
            bmm(matrix, q_i, out=p_i)
        (summed,) = self.collective.all_reduce((p,))  # the first round: every worker's P, summed
        if summed is not p:  # a collective that hands back other tensors
            ps = batches.ps(summed)
        for p_i in ps:
            orthogonalize(p_i, self.orthogonalization_epsilon)
        # One tensor for the second round: the uncompressed tensors, then Q.
        sent = flat.new_empty(layout.uncompressed_numel + layout.q_numel)
        uncompressed, qs = batches.sent_parts(sent)
        batches.gather_uncompressed(compensated, into=uncompressed)
        for matrix, p_i, q_i in zip(stacked.matrices, ps, qs, strict=True):
            bmm(matrix.transpose(1, 2), p_i, out=q_i)
        ctx = PowerCtx(
            layout=layout,
            ps=ps,
            stacked=stacked,
            compensated=compensated if self.use_error_feedback else None,
            shape=grad.shape,
        )
        self._last[group.name] = ctx
        return (sent,), ctx

    def _compensated(self, name: str, flat: Tensor, spare: Tensor | None) -> Tensor:
        """The gradient plus the group's error, in a buffer of its own (``flat`` itself when
        there is no memory to keep)."""
        error = self._errors.get(name)
        if error is None and not self.use_error_feedback:
            return flat
        like = (flat.shape, flat.dtype, flat.device)
        if spare is None or (spare.shape, spare.dtype, spare.device) != like:
            spare = torch.empty_like(flat)
        if error is None:
            return spare.copy_(flat)
        # The error may be on the CPU, restored from a checkpoint.
        return torch.add(flat, error.to(flat.device), out=spare)

    def decompress(self, payload: Payload, ctx: PowerCtx, out: Tensor | None = None) -> Tensor:
        """The workers' sum (n times their mean approximation); records the step's error and
        mean Q in ``ctx`` for the next step."""
        if ctx.layout is None:
            return payload[0].view(ctx.shape)
        assert ctx.stacked is not None, "a compressed step has its matrices"
        batches = ctx.layout.batches
        n = self.collective.world_size
        mean = out.view(-1) if out is not None else payload[0].new_empty(ctx.shape.numel())
        mean_sent = payload[0] / n
        uncompressed, mean_qs = batches.sent_parts(mean_sent)
        for p_i, q_i, approximation in zip(ctx.ps, mean_qs, ctx.stacked.matrices, strict=True):
            bmm(p_i, q_i.transpose(1, 2), out=approximation)
        batches.put_matrices(ctx.stacked, mean)
        batches.put_uncompressed(uncompressed, mean)
        ctx.mean_q = mean_sent[batches.uncompressed_numel :]
        if ctx.compensated is not None:
            ctx.error = ctx.compensated.sub_(mean)
            ctx.compensated = None
        return mean.mul_(n).view(ctx.shape)

    def selected(self, payload: Payload, ctx: Any) -> Tensor | None:
        return None  # every element is approximated

    # ---- state across steps --------------------------------------------------------------------
    def memory_norm(self) -> Tensor:
        self._take_over_all()
        return memory_norm(self._errors.values())

    def _take_over_all(self) -> None:
        for name in list(self._last):
            self._take_over(name)

    def _take_over(self, name: str) -> None:
        """Keep what the group's last step left once it was decompressed: its error and mean Q
        (a step never decompressed, as an fp16 step every worker skips, leaves nothing), and
        the buffers it is done with."""
        ctx = self._last.get(name)
        if ctx is None or ctx.mean_q is None:
            return
        del self._last[name]
        spare = Spare(stacked=ctx.stacked)
        if ctx.error is not None:
            spare.compensated = self._errors.get(name)
            self._errors[name] = ctx.error
        if self.warm_start:
            self._mean_q[name] = ctx.mean_q
        self._spares[name] = spare

    def _forget_if_regrouped(self, name: str, parts: tuple[TensorPart, ...]) -> None:
        """A scheduler that re-plans its groups (after profiling) gives a name other tensors:
        that group's memory starts afresh, as the hook's does when DDP rebuilds its buckets."""
        if self._parts.get(name, parts) != parts:
            self._errors.pop(name, None)
            self._mean_q.pop(name, None)
        self._parts[name] = parts

    def _layout(self, name: str, parts: tuple[TensorPart, ...], ready: tuple[int, ...]) -> Layout:
        key = (name, parts, ready)
        if key not in self._layouts:
            self._layouts[key] = layout_of(parts, self.rank, self.min_compression_rate, ready)
        return self._layouts[key]

    def _start_q(self, name: str, layout: Layout, like: Tensor) -> list[Tensor]:
        """This step's Q, each shape's: last step's mean, orthogonalized; or new draws."""
        q = self._mean_q.pop(name, None)
        # A mean Q restored from a checkpoint lies on the CPU.
        q = self._draw_q(layout, like) if q is None else q.to(like.device)
        qs = layout.batches.qs(q)
        for q_i in qs:
            orthogonalize(q_i, self.orthogonalization_epsilon)
        return qs

    def _draw_q(self, layout: Layout, like: Tensor) -> Tensor:
        """New draws from N(0, 1), one matrix after another from one seed every worker draws
        alike: the hook's own draws, on the host, then one copy to the device."""
        generator = torch.Generator().manual_seed(int(self._seeds.randint(SEED_RANGE)))
        draws = [
            torch.randn(m.cols * m.rank, generator=generator, dtype=like.dtype)
            for m in layout.matrices
        ]
        host = torch.cat(draws) if draws else torch.empty(0, dtype=like.dtype)
        return on_device(host, like.dtype, like.device)

    def state_dict(self) -> dict[str, Any]:
        """The errors and Q's where they live (a checkpoint moves them to the host)."""
        return self._state()

    def snapshot(self) -> object:
        return self._state()

    def restore(self, snapshot: object) -> None:
        assert isinstance(snapshot, dict)
        self.load_state_dict(snapshot)

    def _state(self) -> dict[str, Any]:
        self._take_over_all()
        return {
            "errors": {k: v.detach().clone() for k, v in self._errors.items()},
            "mean_q": {k: v.detach().clone() for k, v in self._mean_q.items()},
            "parts": dict(self._parts),
            "seeds": self._seeds.get_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._errors = {k: v.clone() for k, v in state.get("errors", {}).items()}
        self._mean_q = {k: v.clone() for k, v in state.get("mean_q", {}).items()}
        self._last = {}
        self._spares = {}
        self._parts = dict(state.get("parts", {}))
        self._seeds = np.random.RandomState(self.seed)
        if "seeds" in state:  # the generator where it was
            self._seeds.set_state(state["seeds"])
