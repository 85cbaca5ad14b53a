"""Every sweep of ``benchmarks/reproduce.py`` composes into valid jobs from its recipe, so
``make reproduce`` cannot fail on a config error after an hour of runs; and the runs are named
the way its tables look them up."""

from __future__ import annotations

import pytest

from benchmarks.reproduce import REPRODUCTIONS, label
from gradsync.config.compose import compose_each
from gradsync.report.runs import Run
from tests.helpers.datagen.images import write_mnist


@pytest.fixture
def fashion_mnist(tmp_path, monkeypatch):
    write_mnist(tmp_path, "FashionMNIST")
    monkeypatch.setenv("GRADSYNC_DATA", str(tmp_path))


@pytest.mark.parametrize("name", list(REPRODUCTIONS))
def test_every_sweep_of_a_reproduction_composes(name, fashion_mnist):
    reproduction = REPRODUCTIONS[name]
    for sweep in reproduction.sweeps:
        jobs = compose_each([f"experiment={reproduction.recipe}", *sweep.overrides],
                            launcher_here=False)  # fmt: skip
        problems = [str(problem) for _, problem in jobs if problem is not None]
        assert not problems, (sweep.folder, problems)
        for cfg, _ in jobs:
            assert cfg.runner._target_ == "runners.netem.NetemRunner"
            assert cfg.trainer.checkpoint is False


def test_runs_are_labelled_by_their_own_overrides():
    run = Run(
        path=None,
        status="completed",
        overrides=["experiment=repro_omgs", "scheduler=omgs", "scheduler.rule=paper",
                   "hydra.sweep.dir=x"],
    )  # fmt: skip
    assert label(run) == "scheduler=omgs scheduler.rule=paper"
