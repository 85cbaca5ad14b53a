"""The data path on a GPU. Splits held in memory live on the device and give the CPU's batches
bit for bit (augmented ones too: the same draws, cropped by an exact gather; normalized by true
division), with no host sync per step. Batches read by loader processes reach the device
through the side-stream copy, one batch ahead. A run trains through it all. The same cases and
the prefetcher's order also run on the CPU: ``tests/unit/test_data_path_cpu.py``."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch

from gradsync.data.feeds import Batch
from gradsync.data.prefetch import on_device
from tests.helpers.cli import metrics, run_completed
from tests.helpers.datagen.images import write_cifar10
from tests.helpers.feeds import CPU, assert_same_batches, case_feeds, load_case
from tests.helpers.gpu import needs_gpus, on_gpus

CUDA = torch.device("cuda")


@needs_gpus(1)
@pytest.mark.parametrize("option", ["cifar10", "synthetic"])
def test_in_memory_batches_on_the_gpu_equal_the_cpus_without_a_sync_per_step(option, tmp_path):
    data = load_case(option, tmp_path)
    gpu = case_feeds(data, CUDA)
    batches = gpu.train.epoch(1, skip=0)
    first = next(batches)  # the epoch's one copy of its positions and draws to the device
    torch.cuda.set_sync_debug_mode("error")  # any synchronizing call from here on raises
    try:
        rest = list(batches)
        evaluation = list(gpu.evaluation)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    cpu = case_feeds(data, CPU)
    assert_same_batches([first, *rest], list(cpu.train.epoch(1, skip=0)), CUDA)
    assert_same_batches(evaluation, list(cpu.evaluation), CUDA)


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
    assert_same_batches([first, *batches], host, CUDA)


@needs_gpus(1)
def test_loader_processes_feed_the_gpu_what_they_feed_the_cpu(tmp_path):
    data = load_case("imagenet", tmp_path)
    gpu, cpu = case_feeds(data, CUDA, loader_workers=2), case_feeds(data, CPU)
    assert_same_batches(list(gpu.train.epoch(0, skip=0)), list(cpu.train.epoch(0, skip=0)), CUDA)
    assert_same_batches(list(gpu.evaluation), list(cpu.evaluation), CUDA)


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
