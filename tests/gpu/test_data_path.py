"""The data path on a GPU. Splits held in memory live on the device and give the CPU's batches
bit for bit (augmented ones too: the same draws, cropped by an exact gather; normalized by true
division), with no host sync per step. Batches read by loader processes reach the device
through the side-stream copy, one batch ahead. A run trains through it all."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from gradsync.config.instantiate import build
from gradsync.data.feeds import Batch, Feeds
from gradsync.data.prefetch import on_device
from gradsync.data.spec import DataSplits
from gradsync.jobs.compose import compose_jobs
from tests.helpers.cli import metrics, run_completed
from tests.helpers.datagen.images import write_cifar10, write_imagenet
from tests.helpers.feeds import feeds_of
from tests.helpers.gpu import needs_gpus, on_gpus

CUDA = torch.device("cuda")
DATASETS = {
    "cifar10": write_cifar10,  # augmented: crop and flip
    "imagenet": lambda root: [*write_imagenet(root), "dataset.image_size=32"],
    "synthetic": lambda root: ["dataset.image_shape=[3,64,64]", "dataset.num_samples=40"],
}


def _load(option: str, root: Path) -> DataSplits:
    cfg = compose_jobs([f"dataset={option}", *DATASETS[option](root)], multirun=False)[0]
    return build(cfg.dataset, path="dataset").load()


def _feeds(data: DataSplits, device: torch.device, loader_workers: int = 0) -> Feeds:
    return feeds_of(
        data, batch=2, eval_batch=4, device=device, seed=3, loader_workers=loader_workers
    )


def _assert_same(on_gpu: list[Batch], on_cpu: list[Batch]) -> None:
    assert len(on_gpu) == len(on_cpu) > 0
    for gpu_batch, cpu_batch in zip(on_gpu, on_cpu, strict=True):
        for a, b in zip(gpu_batch, cpu_batch, strict=True):
            assert a.device.type == "cuda"
            assert a.dtype == b.dtype and torch.equal(a.cpu(), b)


@needs_gpus(1)
@pytest.mark.parametrize("option", ["cifar10", "synthetic"])
def test_in_memory_batches_on_the_gpu_equal_the_cpus_without_a_sync_per_step(option, tmp_path):
    data = _load(option, tmp_path)
    gpu = _feeds(data, CUDA)
    batches = gpu.train.epoch(1, skip=0)
    first = next(batches)  # the epoch's one copy of its positions and draws to the device
    torch.cuda.set_sync_debug_mode("error")  # any synchronizing call from here on raises
    try:
        rest = list(batches)
        evaluation = list(gpu.evaluation)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    cpu = _feeds(data, torch.device("cpu"))
    _assert_same([first, *rest], list(cpu.train.epoch(1, skip=0)))
    _assert_same(evaluation, list(cpu.evaluation))


@needs_gpus(1)
def test_loader_batches_are_copied_to_the_gpu_one_batch_ahead():
    host = [(torch.full((2, 3), float(i)).pin_memory(), torch.tensor([i, i])) for i in range(4)]
    asked: list[int] = []

    def source() -> Iterator[Batch]:
        for i, batch in enumerate(host):
            asked.append(i)
            yield batch

    stream = torch.cuda.current_stream()
    batches = on_device(source(), CUDA)
    first = next(batches)
    assert asked == [0, 1]  # batch 1's copy was issued before batch 0 was handed over
    assert torch.cuda.current_stream() == stream  # the side stream is not left current
    _assert_same([first, *batches], host)


@needs_gpus(1)
def test_loader_processes_feed_the_gpu_what_they_feed_the_cpu(tmp_path):
    data = _load("imagenet", tmp_path)
    gpu, cpu = _feeds(data, CUDA, loader_workers=2), _feeds(data, torch.device("cpu"))
    _assert_same(list(gpu.train.epoch(0, skip=0)), list(cpu.train.epoch(0, skip=0)))
    _assert_same(list(gpu.evaluation), list(cpu.evaluation))


@needs_gpus(1)
def test_a_gpu_run_trains_on_cifar_held_on_the_device(gradsync_cmd, cli_env, tmp_path):
    run_dir = run_completed(
        gradsync_cmd,
        cli_env,
        tmp_path / "run",
        "model=resnet20",
        "dataset=cifar10",
        *write_cifar10(tmp_path / "data"),
        "trainer.batch_size=2",
        "trainer.max_steps=20",
        "trainer.log_every=5",
        "trainer.checkpoint=false",
        *on_gpus(1),
    )
    windows = [r for r in metrics(run_dir) if "train/loss" in r]
    assert len(windows) == 4
    assert all(0 < w["time/data"] < w["time/iteration"] for w in windows), windows
    assert all(math.isfinite(w["train/loss"]) for w in windows)
