"""What the benchmarks share: real gradients of CIFAR and ImageNet models, timers that count a
device's queued work, and ``gradsync run`` as a user runs it."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import TypeVar

import torch
import torch.distributed as dist
from torch import Tensor, nn

from gradsync.data.spec import DataSpec
from gradsync.models.resnet import ResNet
from gradsync.models.vgg import VGG
from gradsync.types import GroupInfo, TensorPart

K = TypeVar("K", bound=Hashable)

CIFAR10 = DataSpec(task="classification", num_classes=10, input_shape=(3, 32, 32))
IMAGENET = DataSpec(task="classification", num_classes=1000, input_shape=(3, 224, 224))
MODELS: dict[str, Callable[[], nn.Module]] = {
    "ResNet-18": lambda: ResNet(spec=CIFAR10, depth=18, variant="cifar"),
    "VGG-16": lambda: VGG(spec=CIFAR10, depth=16, variant="cifar"),
}
"""The CIFAR models, which the CPU benchmarks time one after another."""
IMAGENET_MODELS: dict[str, Callable[[], nn.Module]] = {
    "ResNet-50": lambda: ResNet(spec=IMAGENET, depth=50),
}
"""Models at ImageNet's 224 px, too large for a CPU benchmark's every table."""


def _built(name: str) -> tuple[nn.Module, DataSpec]:
    if name in MODELS:
        return MODELS[name](), CIFAR10
    return IMAGENET_MODELS[name](), IMAGENET


def real_gradient(name: str, device: torch.device | None = None) -> tuple[Tensor, list[int]]:
    """One backward pass of ``name`` (of ``MODELS`` or ``IMAGENET_MODELS``) on a random batch
    of its input size, on ``device`` (default: the CPU): a flat gradient with the per-layer
    scale differences real training has, and its tensor sizes."""
    torch.manual_seed(0)
    model, spec = _built(name)
    model.to(device)
    x = torch.randn(8, *spec.input_shape, device=device)
    y = torch.randint(0, spec.num_classes, (8,), device=device)
    nn.functional.cross_entropy(model(x), y).backward()
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.cat([p.grad.reshape(-1) for p in params]), [p.numel() for p in params]


def model_group(name: str, step: int = 0, epoch: int = 0) -> GroupInfo:
    """``name``'s trainable tensors as one group in model order, with their shapes (what a
    compressor that works per matrix, PowerSGD, needs), at ``step`` of ``epoch``."""
    params = [p for p in _built(name)[0].parameters() if p.requires_grad]
    parts = tuple(TensorPart(i, tuple(p.shape)) for i, p in enumerate(params))
    return GroupInfo("all", step, epoch, parts=parts, model_tensors=len(parts))


def median_time(
    fn: Callable[[], object], repeats: int, device: torch.device | None = None
) -> float:
    """Median seconds of ``repeats`` calls of ``fn`` after one warm-up call; on a CUDA
    ``device``, each call's kernels finished (the queue is empty before and after it)."""
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        drained(device)
        start = time.perf_counter()
        fn()
        drained(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def drained(device: torch.device | None) -> None:
    """Every kernel queued on a CUDA ``device`` has run (nothing to wait for elsewhere)."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def block_time(step: Callable[[], object], steps: int, device: torch.device) -> float:
    """Seconds per step of ``steps`` calls of ``step``: every worker of the default process
    group starts and ends the block together and (CUDA) its queued work is done, so the block
    counts its steps' work and nothing before them."""
    finished(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    finished(device)
    return (time.perf_counter() - start) / steps


def finished(device: torch.device) -> None:
    """Every worker is here and (CUDA) the work it queued is done."""
    drained(device)
    dist.barrier()


def alternating_medians(
    steps: Mapping[K, Callable[[], object]],
    *,
    warmup: int,
    rounds: int,
    block: int,
    device: torch.device,
    after_block: Callable[[K], object] | None = None,
) -> dict[K, float]:
    """Median seconds per step of each of ``steps``: after ``warmup`` untimed steps of each,
    ``rounds`` times a block of ``block`` steps of each in turn (ABCABC...), so that a noisy
    machine's drift hits them alike. ``after_block(key)`` runs after each of that key's timed
    blocks, outside its time."""
    for step in steps.values() if warmup else ():
        block_time(step, warmup, device)
    times: dict[K, list[float]] = {key: [] for key in steps}
    for _ in range(rounds):
        for key, step in steps.items():
            times[key].append(block_time(step, block, device))
            if after_block is not None:
                after_block(key)
    return {key: statistics.median(seconds) for key, seconds in times.items()}


def gradsync_command() -> list[str]:
    """``gradsync`` as a user runs it: the installed script, or the module where none is
    installed (a machine given the sources and their dependencies on PYTHONPATH)."""
    script = Path(sys.executable).parent / "gradsync"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gradsync"]


def run_job(overrides: list[str], run_dir: Path, timeout: float | None = None) -> Path:
    """``gradsync run OVERRIDES`` as a user runs it (``gradsync_command``); its run directory.
    A failed job raises with the command's last lines of output. With a ``timeout``, the job
    runs in a process group of its own, and one still running after ``timeout`` seconds (or
    when this process is interrupted) is killed with its workers; a timeout raises
    ``subprocess.TimeoutExpired``. Without one, Ctrl-C reaches the job as it reaches this
    process, so that it can clean up (an emulated network's namespaces)."""
    command = [*gradsync_command(), "run", *overrides]
    own_group = timeout is not None
    with subprocess.Popen(
        [*command, f"hydra.run.dir={run_dir}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=own_group,
    ) as process:
        try:
            _, stderr = process.communicate(timeout=timeout)
        except BaseException:
            if own_group:
                kill_group(process)
            process.communicate()
            raise
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{stderr[-2000:]}")
    return run_dir


def kill_group(process: subprocess.Popen[str]) -> None:
    """Kill ``process`` (started in a session of its own) and every process it started that
    is still there."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def add_netem_job_arguments(parser: argparse.ArgumentParser) -> None:
    """The job the shaped-network benchmarks train: workers, model, batch per worker."""
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch-size", type=int, default=8)
