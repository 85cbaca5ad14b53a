"""Clocks that measure finished work: on CUDA, kernels are asynchronous, so synchronize first."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def make_clock(device: torch.device) -> Callable[[], float]:
    if device.type == "cuda":

        def cuda_clock() -> float:
            torch.cuda.synchronize(device)
            return time.perf_counter()

        return cuda_clock
    return time.perf_counter
