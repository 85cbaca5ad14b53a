"""PowerSGD's matrices of one shape as one batch, so that a step's operations grow with the
number of distinct matrix shapes in a group, not with its tensors.

A layout lists the compressed matrices grouped by shape (the hook's order), and their P's and
Q's lie in the flat P and Q in that order: one shape's P's are one (count × rows × r) view of
the flat P, its Q's one (count × cols × r) view of the flat Q. The matrices themselves lie
wherever the model put them in the group's flat gradient. They are copied into one buffer
(``Stacked``, count × rows × cols per shape), and their approximations put back, through a
window view of the flat gradient that has a rows × cols matrix starting at every element: one
shape's matrices are the windows at their offsets, read by one ``index_select`` and written by
one ``index_copy_`` with an index of ``count`` entries. The tensors sent as they are (vectors,
small matrices, the slices of cut tensors) are gathered and put back by one element index over
all of them (8 bytes per uncompressed element, little next to the matrices).

The indices are copied to a device once (without waiting) and kept with the layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from gradsync.compressors.code_paths import cpu_branch
from gradsync.compressors.device_copy import on_device


@dataclass(frozen=True)
class Matrix:
    """One compressed tensor: where it lies in the group's flat gradient, as a matrix."""

    offset: int
    rows: int
    cols: int
    rank: int


@dataclass(frozen=True)
class ShapeBatch:
    """The compressed matrices of one shape, kept at rank ``rank``, in layout order."""

    rows: int
    cols: int
    rank: int
    offsets: tuple[int, ...]
    """Where each matrix starts in the group's flat gradient."""

    @property
    def count(self) -> int:
        return len(self.offsets)


@dataclass(frozen=True)
class Stacked:
    """Every shape's matrices in one buffer, one shape after another."""

    batches: Batches
    flat: Tensor
    matrices: list[Tensor]
    """Each shape's count × rows × cols view of ``flat``."""

    def fits(self, batches: Batches, like: Tensor) -> bool:
        """Can hold ``batches``' matrices of ``like``'s type and device."""
        return (
            self.batches is batches
            and self.flat.dtype == like.dtype
            and self.flat.device == like.device
        )


@dataclass(frozen=True)
class _Indices:
    """A layout's indices on one device."""

    offsets: tuple[Tensor, ...]
    """Per shape, where its matrices start (int64)."""
    uncompressed: Tensor
    """Every uncompressed element's position in the flat gradient, in the order sent (int64)."""


class Batches:
    """A layout's compressed matrices by shape, and its uncompressed spans, moved between the
    group's flat gradient and the batches in a number of operations set by the shapes."""

    def __init__(self, matrices: Sequence[Matrix], uncompressed: Sequence[tuple[int, int]]) -> None:
        by_shape: dict[tuple[int, int, int], list[int]] = {}
        for m in matrices:
            by_shape.setdefault((m.rows, m.cols, m.rank), []).append(m.offset)
        self.shapes = tuple(ShapeBatch(*shape, tuple(o)) for shape, o in by_shape.items())
        self._p_sizes = [b.count * b.rows * b.rank for b in self.shapes]
        self._q_sizes = [b.count * b.cols * b.rank for b in self.shapes]
        self.matrices_numel = sum(b.count * b.rows * b.cols for b in self.shapes)
        self.p_numel = sum(self._p_sizes)
        self.q_numel = sum(self._q_sizes)
        self.uncompressed_numel = sum(numel for _, numel in uncompressed)
        self._spans = tuple(uncompressed)
        self._indices: dict[torch.device, _Indices] = {}
        if [(m.rows, m.cols, m.rank, m.offset) for m in matrices] != [
            (b.rows, b.cols, b.rank, o) for b in self.shapes for o in b.offsets
        ]:
            raise ValueError("the matrices of one shape must lie together in the layout")

    # ---- P and Q: views of their flat buffers -------------------------------------------------
    def ps(self, p: Tensor) -> list[Tensor]:
        """The flat P (all shapes' P's, in layout order) as each shape's count × rows × r."""
        return [
            flat.view(b.count, b.rows, b.rank)
            for b, flat in zip(self.shapes, p.split_with_sizes(self._p_sizes), strict=True)
        ]

    def qs(self, q: Tensor) -> list[Tensor]:
        """The flat Q as each shape's count × cols × r."""
        return self._q_views(q.split_with_sizes(self._q_sizes))

    def sent_parts(self, sent: Tensor) -> tuple[Tensor, list[Tensor]]:
        """The payload (the uncompressed tensors, then the flat Q) as its uncompressed part and
        each shape's Q."""
        uncompressed, *qs = sent.split_with_sizes([self.uncompressed_numel, *self._q_sizes])
        return uncompressed, self._q_views(qs)

    def _q_views(self, flats: Sequence[Tensor]) -> list[Tensor]:
        return [
            flat.view(b.count, b.cols, b.rank) for b, flat in zip(self.shapes, flats, strict=True)
        ]

    # ---- the gradient's matrices and uncompressed tensors -------------------------------------
    def stacked(self, like: Tensor) -> Stacked:
        """A new buffer for every shape's matrices, on ``like``'s device and of its type."""
        flat = like.new_empty(self.matrices_numel)
        views = flat.split_with_sizes([b.count * b.rows * b.cols for b in self.shapes])
        return Stacked(
            self,
            flat,
            [v.view(b.count, b.rows, b.cols) for b, v in zip(self.shapes, views, strict=True)],
        )

    def gather_matrices(self, flat: Tensor, *, into: Stacked) -> None:
        """Copy each shape's matrices of ``flat`` (1-d) into ``into``."""
        offsets = self._on(flat.device).offsets
        for b, at, batch in zip(self.shapes, offsets, into.matrices, strict=True):
            torch.index_select(_windows(flat, b.rows, b.cols), 0, at, out=batch)

    def put_matrices(self, stacked: Stacked, flat: Tensor) -> None:
        """Write each shape's matrices of ``stacked`` where they lie in ``flat``."""
        offsets = self._on(flat.device).offsets
        for b, at, batch in zip(self.shapes, offsets, stacked.matrices, strict=True):
            _windows(flat, b.rows, b.cols).index_copy_(0, at, batch)

    def gather_uncompressed(self, flat: Tensor, *, into: Tensor) -> None:
        """The uncompressed tensors of ``flat``, one after another into ``into``."""
        if self.uncompressed_numel:
            torch.index_select(flat, 0, self._on(flat.device).uncompressed, out=into)

    def put_uncompressed(self, values: Tensor, flat: Tensor) -> None:
        """``values`` (as ``gather_uncompressed`` lays them out) back where they lie in ``flat``."""
        if self.uncompressed_numel:
            flat.index_copy_(0, self._on(flat.device).uncompressed, values)

    def _on(self, device: torch.device) -> _Indices:
        if device not in self._indices:
            spans = [torch.arange(start, start + numel) for start, numel in self._spans]
            positions = torch.cat(spans) if spans else torch.empty(0, dtype=torch.int64)
            self._indices[device] = _Indices(
                offsets=tuple(on_device(b.offsets, torch.int64, device) for b in self.shapes),
                uncompressed=on_device(positions, torch.int64, device),
            )
        return self._indices[device]


def _windows(flat: Tensor, rows: int, cols: int) -> Tensor:
    """Every rows × cols matrix that starts at an element of ``flat`` (1-d), as one view: the
    i-th is ``flat[i : i + rows·cols].view(rows, cols)``."""
    step = flat.stride(0)
    return flat.as_strided((flat.numel() - rows * cols + 1, rows, cols), (step, cols * step, step))


def bmm(a: Tensor, b: Tensor, *, out: Tensor) -> None:
    """``torch.bmm(a, b, out=out)``; on a CPU one matrix at a time, where a batch of products
    with a thin side (r columns) runs several times slower than its products one by one."""
    if not cpu_branch(a.device):
        torch.bmm(a, b, out=out)
        return
    for i in range(a.shape[0]):
        torch.bmm(a[i : i + 1], b[i : i + 1], out=out[i : i + 1])
