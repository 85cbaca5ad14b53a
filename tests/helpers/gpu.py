"""What the GPU tests need to know about this machine's GPUs, and how they ask for them."""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

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


def on_one_and_two_gpus(names: Iterable[str]) -> list[Any]:
    """``(workers, name)`` cases: each name on one GPU and on two, each case marked with the
    GPUs it needs (so a one-GPU machine runs half of them)."""
    return [
        pytest.param(workers, name, marks=needs_gpus(workers), id=f"{name}-{workers}gpu")
        for workers in (1, 2)
        for name in names
    ]


def trained_windows(run_dir: Path, steps: int) -> list[dict[str, Any]]:
    """The run's training windows, checked: it reached ``steps`` with a finite loss throughout."""
    from tests.helpers.cli import metrics

    windows = [r for r in metrics(run_dir) if "train/loss" in r]
    assert windows[-1]["step"] == steps, windows[-1]
    assert all(math.isfinite(w["train/loss"]) for w in windows), windows
    return windows
