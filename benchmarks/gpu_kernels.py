"""Compression kernels on a real gradient: every compressor option's compress + decompress on
one backward pass's flat gradient, the compressor built from its config (the group's defaults)
and bound to the one-rank collective, past any warm-up (as configured). Beside them, limits
measured in the same run on the same tensor:

* a device copy of the gradient (what any compressor that writes its payload must do);
* the copy plus one ``torch.rand`` per element (a quantizer that draws a random number per
  element); goal: TernGrad, QSGD and signSGD within 3× of it;
* one ``torch.topk`` of the gradient's magnitudes at the compressor's k (a sparsifier that
  selects); goal: Top-k, DGC, Random-k, threshold and DEFT (at one worker) within 1.5× of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from benchmarks.gpu_jobs import compose_job, on_device
from benchmarks.gpu_tables import GOAL_HEADER, Goal, goal_cells, markdown_table, number, reported
from benchmarks.measure import median_time
from gradsync.comm.collective import TorchCollective
from gradsync.compressors.sparse import density_k
from gradsync.config.instantiate import build
from gradsync.measure.wire import STEADY_EPOCH
from gradsync.types import Compressor, GroupInfo

QUANTIZERS = ("terngrad", "qsgd", "signsgd")
SELECTORS = ("topk", "dgc", "randomk", "threshold", "deft")
QUANTIZER_GOAL = Goal(3.0, at_most=True)
SELECTOR_GOAL = Goal(1.5, at_most=True)
COPY, RANDOM = "device copy", "copy + torch.rand"


def goal_of(option: str) -> Goal | None:
    if option in QUANTIZERS:
        return QUANTIZER_GOAL
    return SELECTOR_GOAL if option in SELECTORS else None


@dataclass(frozen=True)
class KernelRow:
    model: str
    compressor: str
    """A compressor option, or empty for a limit's own row."""
    seconds: float | None
    """Median seconds of compress + decompress (of the limit, on a limit's row)."""
    limit: str
    limit_s: float
    goal: Goal | None = None
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        return None if self.seconds is None else self.seconds / self.limit_s


def bound_compressor(option: str, device: torch.device) -> Compressor:
    """The option's compressor as a job composes it, bound to the default process group."""
    cfg = compose_job([f"compressor={option}", *on_device(device)])
    compressor: Compressor = build(cfg.compressor, path="compressor")
    compressor.bind(TorchCollective())
    return compressor


def roundtrip(compressor: Compressor, flat: Tensor, group: GroupInfo) -> Callable[[], Tensor]:
    """One compress + decompress of ``flat`` as ``group``, past any warm-up (as configured)."""
    gradient, out = flat.clone(), torch.empty_like(flat)  # its own: some compress in place
    steady = replace(group, step=compressor.steady_step, epoch=STEADY_EPOCH)

    def call() -> Tensor:
        payload, ctx = compressor.compress(gradient, group=steady)
        return compressor.decompress(payload, ctx, out=out)

    return call


def kernel_rows(
    model: str,
    gradient: Tensor,
    group: GroupInfo,
    options: Sequence[str],
    device: torch.device,
    repeats: int,
) -> list[KernelRow]:
    """The limits' rows, then each option's (``group``: the gradient's tensors). Needs the
    default process group (one rank)."""
    flat = gradient.reshape(-1).to(device)
    target = torch.empty_like(flat)
    limits = {
        COPY: median_time(lambda: target.copy_(flat), repeats, device),
        RANDOM: median_time(
            lambda: (target.copy_(flat), torch.rand(flat.numel(), device=device)), repeats, device
        ),
    }

    def topk_limit(k: int) -> str:
        name = f"torch.topk, k = {k:,}"
        if name not in limits:
            limits[name] = median_time(lambda: flat.abs().topk(k, sorted=False), repeats, device)
        return name

    timed: list[tuple[str, float | None, str, str | None]] = []  # option, seconds, limit, error
    for option in options:
        limit = COPY
        try:
            compressor = bound_compressor(option, device)
            if compressor.density < 1:
                limit = topk_limit(density_k(compressor.density, flat.numel()))
            elif option in QUANTIZERS:
                limit = RANDOM
            call = roundtrip(compressor, flat, group)
            timed.append((option, median_time(call, repeats, device), limit, None))
        except Exception as exc:  # a row that says why, and the others still measured
            timed.append((option, None, limit, reported(exc)))
    own = [KernelRow(model, "", seconds, name, seconds) for name, seconds in limits.items()]
    return own + [
        KernelRow(model, option, seconds, limit, limits[limit], goal_of(option), error)
        for option, seconds, limit, error in timed
    ]


def kernels_table(rows: Sequence[KernelRow]) -> str:
    header = ["model", "compressor", "compress + decompress ms", "limit", "limit ms"]
    header += ["÷ limit", *GOAL_HEADER]
    lines = []
    for row in rows:
        if not row.compressor:
            lines.append([row.model, f"*{row.limit}*", "", "", number(row.limit_s * 1e3, 3)])
            lines[-1] += ["", "", ""]
            continue
        seconds = number(None if row.seconds is None else row.seconds * 1e3, 3)
        cells = [row.model, row.compressor, row.error or seconds, row.limit]
        lines.append([*cells, number(row.limit_s * 1e3, 3), *goal_cells(row.goal, row.ratio)])
    return markdown_table(header, lines, text_columns=2)
