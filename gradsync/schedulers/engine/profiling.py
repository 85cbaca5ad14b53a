"""Measuring what the merge planner needs on the running job: per-tensor backward times (from
gradient hooks), the top-k time model γ (torch.topk on this device) and the exchange model
(α, β) of an all-gather on the real process group. Every worker measures; the maximum over
workers is used, so all of them plan the same groups."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import torch

from gradsync.algorithms.costs import fit_alpha_beta, fit_gamma
from gradsync.compressors.sparse import density_k
from gradsync.schedulers.engine.buckets import ForwardTimer
from gradsync.schedulers.engine.hooks import ModelHooks, hook_model
from gradsync.types import Collective

TOPK_SIZES = tuple(2**k for k in range(12, 21, 2))  # 4K .. 1M elements
# 1 KiB .. 4 MiB per worker: the largest takes milliseconds even on loopback, so the cost per
# byte stands out of a shared host's noise.
EXCHANGE_BYTES = tuple(2**k for k in range(10, 23, 2))


@dataclass
class BackwardProfile:
    """Per-tensor backward seconds (backward order) and forward seconds, summed over steps."""

    backward: list[float]
    forward: float = 0.0
    steps: int = 0
    selections: list[tuple[int, float]] = field(default_factory=list)
    """(elements, seconds) of every compression in the profiled steps."""

    def add(self, backward: Sequence[float], forward: float) -> None:
        self.backward = [a + b for a, b in zip(self.backward, backward, strict=True)]
        self.forward += forward
        self.steps += 1

    def agreed(self, collective: Collective, device: torch.device) -> tuple[list[float], float]:
        """Mean per step, then the largest over workers (every worker gets the same values)."""
        steps = max(self.steps, 1)
        values = [v / steps for v in (*self.backward, self.forward)]
        agreed = collective.reduce_metrics(values, device=device, op="max")
        return agreed[:-1], agreed[-1]


def samples_within(seconds_each: float, budget_s: float, *, least: int, most: int) -> int:
    """How many samples of ``seconds_each`` to take: as many as fit in ``budget_s``, but at
    least ``least`` and at most ``most`` (a fast measurement takes more, since medians of
    milliseconds move with every hiccup of a shared host)."""
    return min(most, max(least, int(budget_s / max(seconds_each, 1e-6))))


def _abs_topk(x: torch.Tensor, k: int) -> object:
    return torch.topk(x.abs(), k)


def median_seconds(run: Callable[[], object], *, repeats: int, clock: Callable[[], float]) -> float:
    run()  # warm-up: allocation, lazy initialisation
    times = []
    for _ in range(repeats):
        start = clock()
        run()
        times.append(clock() - start)
    return statistics.median(times)


def measure_gamma(
    density: float,
    collective: Collective,
    device: torch.device,
    *,
    clock: Callable[[], float],
    repeats: int = 5,
) -> float:
    """Fit γ of TKPM(d) = γ·ρ·d·log2 d to torch.topk of |x| on this device."""
    seconds = []
    for d in TOPK_SIZES:
        x = torch.randn(d, device=device)
        k = density_k(density, d)
        seconds.append(median_seconds(partial(_abs_topk, x, k), repeats=repeats, clock=clock))
    agreed = collective.reduce_metrics(seconds, device=device, op="max")
    return fit_gamma(TOPK_SIZES, agreed, density)


def measure_exchange(
    collective: Collective,
    device: torch.device,
    *,
    clock: Callable[[], float],
    repeats: int = 5,
) -> tuple[float, float]:
    """Fit (α, β) of AGPM = α + β·bytes to all-gathers on the real process group; the bytes are
    what one worker sends. The measuring traffic is left out of the byte counts."""
    seconds = []
    for nbytes in EXCHANGE_BYTES:
        payload = (torch.zeros(nbytes // 4, device=device),)
        seconds.append(
            # The same size on every worker, as a fixed-k top-k's: no lengths go first.
            median_seconds(
                partial(collective.all_gather, payload, same_shape=True),
                repeats=repeats,
                clock=clock,
            )
        )
    collective.take_bytes()
    agreed = collective.reduce_metrics(seconds, device=device, op="max")
    return fit_alpha_beta([float(b) for b in EXCHANGE_BYTES], agreed)


def profile_model(
    model: torch.nn.Module,
    loss: Callable[[], torch.Tensor],
    *,
    steps: int = 5,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[list[float], float]:
    """(per-tensor backward seconds in backward order, forward seconds) of ``loss()`` on this
    machine in this process: the mean over ``steps`` after one warm-up step. A tensor's backward
    time runs from the previous gradient (or the end of the forward pass) to its own."""
    params = [p for p in model.parameters() if p.requires_grad][::-1]
    ready = [0.0] * len(params)
    last = [0.0]

    def on_gradient(index: int) -> None:
        now = clock()
        ready[index] += now - last[0]
        last[0] = now

    hooked = hook_model(model, params, ModelHooks(on_gradient=on_gradient))
    forward = 0.0
    try:
        for step in range(steps + 1):
            if step == 1:  # the warm-up step is left out
                ready[:] = [0.0] * len(params)
                forward = 0.0
            start = clock()
            value = loss()
            last[0] = clock()
            forward += last[0] - start
            value.backward()
            model.zero_grad(set_to_none=True)
    finally:
        hooked.remove()
    return [t / steps for t in ready], forward / steps


def profile_tensors(
    model: torch.nn.Module,
    loss: Callable[[], torch.Tensor],
    *,
    steps: int = 5,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[list[float], list[float]]:
    """(per-tensor forward seconds, per-tensor backward seconds), both in backward order, as
    ``profile_model`` measures them; the forward pass is shared among tensors by module hooks
    (``ForwardTimer``), the warm-up step left out."""
    params = [p for p in model.parameters() if p.requires_grad][::-1]
    timer = ForwardTimer(model, params, clock)
    calls = [0]

    def timed_loss() -> torch.Tensor:
        if calls[0] == 1:  # the first measured step: forget the warm-up's times
            timer.take(0.0)
        calls[0] += 1
        return loss()

    try:
        backward, forward = profile_model(model, timed_loss, steps=steps, clock=clock)
    finally:
        timer.remove()
    return timer.take(forward), backward
