"""The GPU mode of ``benchmarks.allreduce_vs_ddp``: one worker per GPU, a clean refusal where
it cannot run (these two need no GPU), and on GPUs a short run through its CUDA path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.gpu import cuda_devices, needs_gpus

REPO = Path(__file__).resolve().parents[2]


def _benchmark(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.allreduce_vs_ddp", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_one_worker_per_gpu():
    # Imported here: the benchmark pulls in torchvision, which collecting this folder need not.
    from benchmarks.allreduce_vs_ddp import workers_for

    assert workers_for("cuda", None, gpus=4) == 4
    assert workers_for("cuda", None, gpus=1) == 1
    assert workers_for("cuda", 2, gpus=4) == 2
    assert workers_for("cpu", None, gpus=0) == 2  # the CPU default, GPUs or not
    with pytest.raises(ValueError, match=r"needs a GPU each .* has 2; use --workers 2"):
        workers_for("cuda", 3, gpus=2)
    with pytest.raises(ValueError, match="torch finds none; use --device cpu"):
        workers_for("cuda", None, gpus=0)


def test_refuses_cuda_without_a_gpu_in_one_line():
    hidden = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU visible, on any machine
    result = _benchmark("--device", "cuda", "--model", "resnet50", env=hidden)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --device cuda needs a CUDA GPU and torch finds none; use --device cpu"
    ]
    assert result.stdout == ""


@needs_gpus(1)
def test_short_run_on_every_gpu():
    result = _benchmark("--device", "cuda", "--model", "cnn", "--steps", "2", "--rounds", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    gpus = cuda_devices()
    setting = "1 NCCL worker on 1 GPU" if gpus == 1 else f"{gpus} NCCL workers, one GPU each"
    assert setting in result.stdout
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("| cnn |")]
    assert all(float(cell) > 0 for cell in row.strip("| ").split(" | ")[2:7])
