"""What the benchmarks share: real gradients of CIFAR models and a median timer."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

from gradsync.data.spec import DataSpec
from gradsync.models.resnet import ResNet
from gradsync.models.vgg import VGG
from gradsync.types import GroupInfo, TensorPart

CIFAR10 = DataSpec(task="classification", num_classes=10, input_shape=(3, 32, 32))
MODELS: dict[str, Callable[[], nn.Module]] = {
    "ResNet-18": lambda: ResNet(spec=CIFAR10, depth=18, variant="cifar"),
    "VGG-16": lambda: VGG(spec=CIFAR10, depth=16, variant="cifar"),
}


def real_gradient(name: str) -> tuple[Tensor, list[int]]:
    """One backward pass of ``name`` on a random CIFAR-sized batch: a flat gradient with the
    per-layer scale differences real training has, and its tensor sizes."""
    torch.manual_seed(0)
    model = MODELS[name]()
    x, y = torch.randn(8, *CIFAR10.input_shape), torch.randint(0, 10, (8,))
    nn.functional.cross_entropy(model(x), y).backward()
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.cat([p.grad.reshape(-1) for p in params]), [p.numel() for p in params]


def model_group(name: str, step: int = 0) -> GroupInfo:
    """``name``'s trainable tensors as one group in model order, with their shapes (what a
    compressor that works per matrix, PowerSGD, needs), at ``step``."""
    params = [p for p in MODELS[name]().parameters() if p.requires_grad]
    parts = tuple(TensorPart(i, tuple(p.shape)) for i, p in enumerate(params))
    return GroupInfo("all", step, parts=parts, model_tensors=len(parts))


def median_time(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_job(overrides: list[str], run_dir: Path) -> Path:
    """``gradsync run OVERRIDES`` as a user runs it (the installed command); its run directory.
    A failed job raises with the command's last lines of output."""
    command = [str(Path(sys.executable).parent / "gradsync"), "run", *overrides]
    result = subprocess.run(
        [*command, f"hydra.run.dir={run_dir}"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    return run_dir


def add_netem_job_arguments(parser: argparse.ArgumentParser) -> None:
    """The job the shaped-network benchmarks train: workers, model, batch per worker."""
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch-size", type=int, default=8)
