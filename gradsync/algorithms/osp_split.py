"""The pure core of OSP, Overlapped Synchronization Parallel: no process group, no I/O
(docs/methods/schedulers/osp.md; "osp.md" below).

OSP splits the layers (one parameter tensor each) every iteration into two sets.

* Important layers are synchronized routinely (RS) behind a barrier, as in BSP.
* Unimportant layers (G^u) are synchronized in the background during the next iteration's
  compute (ICS). Until the global gradient arrives, the worker uses its local gradient in its
  place (Local-Gradient-based Parameter correction, LGP) and corrects the parameters afterwards.

This module holds the decisions and the arithmetic, each small enough to test exhaustively:

* ``layer_importance``: eq. 4, I^l = Σ_j |g_j·P_j|, from the previous global gradient and
  parameters (the parameter server (PS) computes it while the workers compute).
* ``split_unimportant``: the Gradient Importance Bitmap (GIB). Least important layers go into
  G^u while they fit in the byte budget, stopping at the first that does not (osp.md, "Where
  gradsync differs from the paper").
* ``umax_bytes`` (``osp_budget.py``): the upper bound U_max on the ICS bytes.
* ``SizeSchedule``: the per-epoch budget S_i, from 0 (pure BSP) up to U_max as the loss falls.
* ``lgp_step`` / ``lgp_correct``: eq. 6 and eq. 7, written with parameter deltas (Δ = −η·g).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


def layer_bytes(params: Sequence[Tensor]) -> list[int]:
    """Bytes each layer would send, the unit of the GIB budget (4·n_l for float32 layers)."""
    return [p.numel() * p.element_size() for p in params]


def layer_importance(grads: Sequence[Tensor], params: Sequence[Tensor]) -> list[float]:
    """Per-layer importance I^l = Σ_j |g_j·P_j| (eq. 4).

    |g·P| is the first-order estimate of the loss change if P were zeroed, so a layer with a
    small sum can tolerate a stale (local) gradient for one iteration. Pass the *global*
    gradient and parameters of the previous iteration, so every worker (and the PS) derives the
    same GIB. The sum is taken in float64, so large layers of small terms neither lose precision
    nor overflow, and ties between layers are decided by the same value on every device. One
    host transfer for all layers, not one per layer.
    """
    if len(grads) != len(params):
        raise ValueError(f"{len(grads)} gradients for {len(params)} parameters")
    sums = []
    for index, (g, p) in enumerate(zip(grads, params, strict=True)):
        if g.shape != p.shape:
            raise ValueError(
                f"layer {index}: gradient shape {tuple(g.shape)} != parameter {tuple(p.shape)}"
            )
        g64 = g.detach().to(torch.float64)
        p64 = p.detach().to(device=g64.device, dtype=torch.float64)
        sums.append((g64 * p64).abs().sum())
    if not sums:
        return []
    device = sums[0].device
    return [float(v) for v in torch.stack([s.to(device) for s in sums]).tolist()]


def split_unimportant(
    importance: Sequence[float], sizes_bytes: Sequence[int], budget_bytes: float
) -> list[bool]:
    """The GIB: True = important (RS, behind the barrier), False = unimportant (ICS).

    Layers are taken by importance ascending, ties by layer index, so the result depends only
    on the (importance, size) pairs and permuting the layers permutes the result. They go into
    the unimportant set while the running byte total stays ≤ ``budget_bytes``; the first layer
    that would overflow stops the scan, even if a smaller, more important layer after it would
    still fit (osp.md, "Where gradsync differs from the paper"): G^u is then exactly a
    lowest-importance prefix, never a knapsack packing that would delay an important layer to
    fill the budget. A budget ≤ 0 keeps every layer important (even empty ones), so S = 0 is
    exactly BSP (osp.md, "What the tests check"). A NaN importance counts as the most
    important: when in doubt, synchronize behind the barrier.
    """
    if len(importance) != len(sizes_bytes):
        raise ValueError(f"{len(importance)} importances for {len(sizes_bytes)} layer sizes")
    if any(s < 0 for s in sizes_bytes):
        raise ValueError(f"layer sizes must be ≥ 0 bytes, got {list(sizes_bytes)}")
    if math.isnan(budget_bytes):
        raise ValueError("budget_bytes is NaN")
    important = [True] * len(importance)
    if budget_bytes <= 0:
        return important

    def key(i: int) -> tuple[float, int]:
        value = float(importance[i])
        return (math.inf if math.isnan(value) else value, i)

    total = 0
    for i in sorted(range(len(importance)), key=key):
        if total + sizes_bytes[i] > budget_bytes:
            break
        total += sizes_bytes[i]
        important[i] = False
    return important


@dataclass
class SizeSchedule:
    """The per-epoch ICS budget S_i (the paper's Algorithm 1; osp.md, "The byte budget"), grown
    as the training loss falls.

    The paper sets S_i = (1 − loss_i / L)·U_max with L the first epoch's loss and loss_i "the
    epoch's" loss. The budget must be fixed when epoch i starts (it shapes every GIB of the
    epoch), while epoch i's own mean loss is known only when it ends, so loss_i here is the
    mean training loss of the *previous* epoch, the latest complete measurement. Hence:

    * epoch 0: S = 0 (pure BSP); nothing measured yet.
    * epoch 1: L := mean loss of epoch 0, so S = (1 − L/L)·U_max = 0 as well.
    * epoch e ≥ 2: S = clamp((1 − loss_{e−1} / L)·U_max, 0, U_max).

    The clamp handles a loss that rose above L (S = 0, back to BSP). A non-finite previous
    loss also gives 0. S is non-decreasing while the loss is non-increasing.
    """

    umax: float
    first_loss: float | None = None

    def budget_for_epoch(self, epoch: int, prev_epoch_loss: float | None) -> float:
        """Bytes of unimportant layers allowed in each iteration of ``epoch`` (0-based).

        ``prev_epoch_loss`` is the mean training loss of epoch ``epoch − 1``: None at epoch 0,
        a number afterwards. The first reported loss becomes L.
        """
        if epoch < 0:
            raise ValueError(f"epoch must be ≥ 0, got {epoch}")
        if epoch == 0:
            if prev_epoch_loss is not None:
                raise ValueError("epoch 0 has no previous epoch; pass prev_epoch_loss=None")
            return 0.0
        if prev_epoch_loss is None:
            raise ValueError(f"epoch {epoch} needs the mean training loss of epoch {epoch - 1}")
        if self.first_loss is None:
            if not (math.isfinite(prev_epoch_loss) and prev_epoch_loss > 0):
                raise ValueError(
                    f"the first epoch's loss must be finite and > 0, got {prev_epoch_loss}"
                )
            self.first_loss = float(prev_epoch_loss)
        if not math.isfinite(prev_epoch_loss):
            return 0.0
        budget = (1.0 - prev_epoch_loss / self.first_loss) * self.umax
        return min(max(budget, 0.0), self.umax)

    def state_dict(self) -> dict[str, Any]:
        """Plain numbers (first_loss may be None), for a checkpoint."""
        return {"umax": float(self.umax), "first_loss": self.first_loss}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.umax = float(state["umax"])
        first = state["first_loss"]
        self.first_loss = None if first is None else float(first)


def lgp_step(prev: Tensor, delta: Tensor) -> Tensor:
    """Eq. 6 for one layer: P_partial = P_{i−1} + Δ, where Δ is the global delta for an
    important layer (it arrived behind the barrier) and the worker's own local delta for an
    unimportant one (its global delta is still in flight), so compute need not wait for it."""
    return prev + delta


def lgp_correct(local_delta: Tensor, global_delta: Tensor, partial: Tensor) -> Tensor:
    """Eq. 7 for one unimportant layer, once its global gradient arrives:
    P_partial − Δ(G^l) + Δ(G^g). Swaps the local stand-in for the global delta, restoring
    P_partial = P_global up to float rounding (osp.md, "What the tests check"); updates made
    since on top of P_partial are kept. Out of place: the caller decides whether to ``copy_`` it
    in."""
    return partial - local_delta + global_delta
