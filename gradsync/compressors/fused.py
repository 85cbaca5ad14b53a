"""Elementwise work fused into a few kernels on a GPU, with the eager code as its reference.

A quantizer's encode and decode are a dozen elementwise operations over every element; eager
PyTorch launches one kernel per operation, each a full pass over memory and a few microseconds
of host time. ``FusedKernel(fn)`` runs ``fn`` through ``torch.compile`` (Inductor: Triton on a
GPU) where the GPU's route applies, and ``fn`` itself on a CPU, where the compile would cost more
than a short run saves and the eager kernels are as fast. ``fn`` stays the definition: tests
hold the compiled kernel to it.

Sizes vary per group, so the compile is dynamic (one compile per function and dtype). An
operation counter (``benchmarks.op_counts``) cannot look inside a compiled kernel: it observes
each fused call (``observe_fused``) as the number of kernels Inductor generated for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

import torch
from torch import Tensor
from torch.utils._python_dispatch import _disable_current_modes

from gradsync.compressors.code_paths import cpu_branch

R = TypeVar("R")
log = logging.getLogger("gradsync")
Observer = Callable[[str, int], None]
"""Called with a fused kernel's name and how many kernels Inductor made for it."""
_observers: list[Observer] = []


class FusedKernel(Generic[R]):
    def __init__(self, fn: Callable[..., R]) -> None:
        self.eager = fn
        self.name = fn.__name__
        self._compiled: Callable[..., R] | None = None
        self.kernels = 0
        """Kernels Inductor generated at the latest compile (0 until one)."""
        self._warned = False

    def __call__(self, *args: Any) -> R:
        device = next(a.device for a in args if isinstance(a, Tensor))
        if cpu_branch(device):
            return self.eager(*args)
        if self._compiled is None:
            self._compiled = torch.compile(self.eager, dynamic=True, fullgraph=True)
        from torch._dynamo.exc import FailOnRecompileLimitHit
        from torch._inductor import metrics  # loaded by torch.compile already

        before = metrics.generated_kernel_count
        try:
            if _observers:  # under their dispatch modes Dynamo would run the function eagerly
                with _disable_current_modes(), torch._C.DisableTorchFunction():
                    result = self._compiled(*args)
            else:
                result = self._compiled(*args)
        except FailOnRecompileLimitHit:
            # A kind of input (dtype, a size of 0 or 1) past the compiles Dynamo makes for one
            # function: this call runs the reference (the same results, a kernel per
            # operation); the kinds compiled already stay compiled.
            if not self._warned:
                log.warning(
                    f"{self.name}: compiled for too many kinds of input; runs the new ones eagerly"
                )
                self._warned = True
            return self.eager(*args)
        self.kernels = (metrics.generated_kernel_count - before) or self.kernels
        for observer in _observers:
            observer(self.name, self.kernels)
        return result


def fused(fn: Callable[..., R]) -> FusedKernel[R]:
    """``fn`` as a ``FusedKernel`` (a decorator)."""
    return FusedKernel(fn)


@contextmanager
def observe_fused(observer: Observer) -> Iterator[None]:
    """Inside: every fused call is reported to ``observer``."""
    _observers.append(observer)
    try:
        yield
    finally:
        _observers.remove(observer)
