"""Clocks that measure finished work: on CUDA, kernels are asynchronous, so synchronize first.

Only the calling thread's current stream is waited for, not the whole device: a scheduler's
communication thread runs on a stream of its own, so the compute side's timings do not wait for
its exchanges, and its own timings (profiled exchanges) do not wait for backward."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def make_clock(device: torch.device) -> Callable[[], float]:
    if device.type == "cuda":

        def cuda_clock() -> float:
            torch.cuda.current_stream(device).synchronize()
            return time.perf_counter()

        return cuda_clock
    return time.perf_counter
