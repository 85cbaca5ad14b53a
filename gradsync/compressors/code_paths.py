"""The one switch between a compressor's CPU-only branches and the code a GPU runs.

Some kernels take another route on a CPU (rows in cache-sized blocks, a loop of small
``topk`` calls, two passes where a GPU makes one), because a CPU's costs differ. A count of the
operations a GPU would launch (``benchmarks.op_counts``) must see the GPU's route on a CPU:
``gpu_branches()`` turns the CPU-only branches off, and the layouts cached per device are built
again on entry and on exit so that none built for the other route is reused.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch

_F = TypeVar("_F", bound=Callable[..., Any])
_gpu_route_on_cpu = False
_layout_caches: list[Any] = []


def cpu_branch(device: torch.device) -> bool:
    """True where the CPU-only route applies: on a CPU, unless ``gpu_branches()`` is on."""
    return device.type == "cpu" and not _gpu_route_on_cpu


def layout_cache(fn: _F) -> _F:
    """``functools.lru_cache`` for a layout built once per group and device, which
    ``gpu_branches`` clears (a layout may hold the route it was built for)."""
    cached = functools.lru_cache(maxsize=4096)(fn)  # a layout per group; hundreds at most
    _layout_caches.append(cached)
    return cached  # type: ignore[return-value]


def latest_per_layout(varying: int) -> Callable[[_F], _F]:
    """Like ``layout_cache``, but per layout (every argument but the one at ``varying``) only
    the value for the latest ``varying`` argument is kept: a density warm-up builds plans at
    several densities, and a plan can hold an index per element (hundreds of MB for a large
    model) that no later step would use again."""

    def decorate(fn: _F) -> _F:
        latest = _LatestPerLayout(fn, varying)
        _layout_caches.append(latest)
        return functools.wraps(fn)(latest)  # type: ignore[return-value]

    return decorate


class _LatestPerLayout:
    def __init__(self, fn: Callable[..., Any], varying: int) -> None:
        self.fn, self.varying = fn, varying
        self.held: dict[tuple[Any, ...], tuple[Any, Any]] = {}

    def __call__(self, *args: Any) -> Any:
        layout = args[: self.varying] + args[self.varying + 1 :]
        setting = args[self.varying]
        held = self.held.get(layout)
        if held is None or held[0] != setting:
            held = self.held[layout] = (setting, self.fn(*args))
        return held[1]

    def cache_clear(self) -> None:
        self.held.clear()


@contextmanager
def gpu_branches() -> Iterator[None]:
    """Inside: every compressor takes the route a GPU takes, on any device."""
    global _gpu_route_on_cpu
    previous = _gpu_route_on_cpu
    _clear()
    _gpu_route_on_cpu = True
    try:
        yield
    finally:
        _gpu_route_on_cpu = previous
        _clear()


def _clear() -> None:
    for cache in _layout_caches:
        cache.cache_clear()
