"""What the GPU tests need to know about this machine's GPUs, and how they ask for them."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
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
    """Overrides of a ``gradsync run`` of ``workers`` GPU workers: one per GPU over NCCL where
    there are as many GPUs, sharing them over gloo where there are fewer (``Placement``)."""
    return ["trainer.device=cuda", f"trainer.workers={workers}"]


@dataclass(frozen=True)
class Placement:
    """``workers`` on ``gpus`` GPUs: one each (NCCL), or all on one (gloo: they share it)."""

    workers: int
    gpus: int

    @property
    def overrides(self) -> list[str]:
        return on_gpus(self.workers)

    def env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with only this placement's GPUs visible (the first of those visible now),
        so that workers share one GPU also on a machine that has more."""
        visible = env.get("CUDA_VISIBLE_DEVICES") or ",".join(map(str, range(cuda_devices())))
        return {**env, "CUDA_VISIBLE_DEVICES": ",".join(visible.split(",")[: self.gpus])}

    @property
    def id(self) -> str:
        return f"{self.workers}on{self.gpus}gpu"


ONE_GPU_EACH = (Placement(1, 1), Placement(2, 2))
SHARING_ONE_GPU = (Placement(2, 1), Placement(4, 1))
"""Several workers on one GPU: the multi-worker CUDA paths on a machine with one GPU."""


def placed(
    names: Iterable[str], placements: Iterable[Placement] = (*ONE_GPU_EACH, *SHARING_ONE_GPU)
):
    """``(placement, name)`` cases: each name on each placement, each case marked with the
    GPUs it needs (a one-GPU machine runs all but the two-GPU ones)."""
    return [
        pytest.param(placement, name, marks=needs_gpus(placement.gpus), id=f"{name}-{placement.id}")
        for placement in placements
        for name in names
    ]


def trained_windows(run_dir: Path, steps: int) -> list[dict[str, Any]]:
    """The run's training windows, checked: it reached ``steps`` with a finite loss throughout."""
    from tests.helpers.cli import metrics

    windows = [r for r in metrics(run_dir) if "train/loss" in r]
    assert windows[-1]["step"] == steps, windows[-1]
    assert all(math.isfinite(w["train/loss"]) for w in windows), windows
    return windows
