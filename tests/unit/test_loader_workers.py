"""Loader processes (``trainer.loader_workers``): which datasets get them, how many ``auto``
gives a worker, and the cores a Slurm task asks for them."""

from __future__ import annotations

import os

import pytest

from gradsync.config.instantiate import build
from gradsync.data import loader_workers
from gradsync.data.memory import InMemorySplit
from gradsync.families import streamed_from_disk
from gradsync.jobs.compose import ConfigError, compose_jobs
from gradsync.jobs.discovery import group_options
from tests.helpers.datagen import generators
from tests.helpers.datagen.images import write_imagenet

# A model of each non-classification task (the default model classifies).
MODELS = {"wikitext2": "model=lstm", "ptb": "model=lstm", "movielens": "model=ncf"}


@pytest.mark.parametrize("option", group_options()["dataset"])
def test_the_schema_says_which_datasets_are_read_from_disk(option, tmp_path):
    write = generators().get(option)
    overrides = [] if write is None else write(tmp_path)
    cfg = compose_jobs(  # loaded, not launched
        [f"dataset={option}", *overrides, *MODELS.get(option, "").split()],
        multirun=False,
        launcher_here=False,
    )[0]
    splits = build(cfg.dataset, path="dataset").load()
    held = isinstance(splits.train, InMemorySplit) and isinstance(splits.test, InMemorySplit)
    assert streamed_from_disk(cfg.dataset) is not held
    assert option != "imagenet" or not held  # the one dataset too large to hold


def test_auto_is_the_workers_share_of_its_cores_less_its_compute_threads():
    assert loader_workers.loader_workers("auto", cpus=16, threads=1) == 15
    assert loader_workers.loader_workers("auto", cpus=16, threads=4) == 12
    assert loader_workers.loader_workers("auto", cpus=1, threads=1) == 0
    assert loader_workers.loader_workers("auto", cpus=96, threads=1) == loader_workers.AUTO_MAX
    assert loader_workers.loader_workers("3", cpus=1, threads=1) == 3  # a number is a number


def test_a_workers_cores_are_its_slurm_tasks_or_its_share_of_the_affinity():
    slurm = {"SLURM_CPUS_PER_TASK": "9"}
    assert loader_workers.worker_cpus(slurm, slurm_task=True, processes_here=8) == 9
    mine = len(os.sched_getaffinity(0))
    assert loader_workers.worker_cpus(slurm, slurm_task=False, processes_here=1) == mine
    assert loader_workers.worker_cpus({}, slurm_task=True, processes_here=2) == max(1, mine // 2)
    assert loader_workers.worker_cpus({}, slurm_task=False, processes_here=4 * mine) == 1


@pytest.mark.parametrize(
    ("dataset", "settings", "cores"),
    [
        ("digits", [], 1),  # held in memory: compute threads only
        ("imagenet", [], 1 + loader_workers.SLURM_AUTO),
        ("imagenet", ["trainer.threads_per_worker=2"], 2 + loader_workers.SLURM_AUTO),
        ("imagenet", ["trainer.loader_workers=3"], 4),
        ("digits", ["trainer.loader_workers=2"], 3),  # as asked, though it will not use them
    ],
)
def test_a_slurm_task_asks_for_its_loader_processes_cores(dataset, settings, cores, tmp_path):
    data = write_imagenet(tmp_path) if dataset == "imagenet" else []
    (cfg,) = compose_jobs(
        ["runner=slurm", f"dataset={dataset}", *data, *settings],
        multirun=False,
        launcher_here=False,
    )
    assert cfg.runner.cpus_per_task == cores


@pytest.mark.parametrize("value", ["-1", "many", "1.5"])
def test_a_bad_loader_workers_is_one_line(value):
    with pytest.raises(ConfigError) as info:
        compose_jobs([f"trainer.loader_workers={value}"], multirun=False)
    assert str(info.value) == (
        f"trainer.loader_workers must be auto or an integer >= 0, got {value}"
    )
