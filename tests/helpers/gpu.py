"""What the GPU tests need to know about this machine's GPUs, and how they ask for them."""

from __future__ import annotations

from functools import cache

import pytest
import torch

REPRODUCIBLE_CUBLAS = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
"""cuBLAS's documented setting for bitwise-reproducible results while several streams run (the
compute stream, the communication thread's, NCCL's), for runs whose parameters a test
compares."""


@cache
def cuda_devices() -> int:
    """CUDA GPUs this process may use (0 without a driver or a CUDA build of torch)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def missing_gpus(needed: int) -> str | None:
    """Why a test that needs ``needed`` GPUs cannot run here (one line), or None."""
    have = cuda_devices()
    if have == 0:
        return "needs CUDA: torch finds no CUDA device on this machine"
    if have < needed:
        return f"needs {needed} CUDA GPUs, this machine has {have}"
    return None


def needs_gpus(count: int) -> pytest.MarkDecorator:
    """The ``gpu`` mark of a test (or a parameter) that needs ``count`` GPUs (the skip is
    ``tests/conftest.py``'s)."""
    return pytest.mark.gpu(count=count)


def on_gpus(workers: int) -> list[str]:
    """Overrides of a ``gradsync run`` on ``workers`` GPUs: one worker per GPU, over NCCL."""
    return ["trainer.device=cuda", f"trainer.workers={workers}"]
