"""Every sweep of ``benchmarks/reproduce.py`` composes into valid jobs from its recipe, so
``make reproduce`` cannot fail on a config error after an hour of runs; and the runs are named
the way its tables look them up."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from benchmarks.reproduce import REPRODUCTIONS, _osp_balanced_table, label
from gradsync.jobs.compose import compose_each
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
            assert cfg.trainer.device.value == reproduction.device


def test_runs_are_labelled_by_their_own_overrides():
    run = Run(
        path=None,
        status="completed",
        overrides=["experiment=repro_omgs", "scheduler=omgs", "scheduler.rule=paper",
                   "hydra.sweep.dir=x"],
    )  # fmt: skip
    assert label(run) == "scheduler=omgs scheduler.rule=paper"


def _ps_run(scheduler: str, seed: int, iteration: float, accuracy: float) -> Run:
    """Two log windows before OSP's split (step 22, the 2nd evaluation) and two after."""
    config = OmegaConf.create({"trainer": {"workers": 4, "batch_size": 32, "seed": seed}})
    windows = [
        {"step": step, "time/iteration": seconds, "time/compute_max": 0.02, "time/comm": 0.03,
         "comm/bytes_sent": 500e3, "sched/unimportant_fraction": share}
        for step, seconds, share in ((10, 0.1, 0.0), (20, 0.1, 0.0), (30, iteration, 0.5),
                                     (40, iteration, 0.5))
    ]  # fmt: skip
    evals = [{"step": step, "eval/accuracy": accuracy} for step in (11, 22, 44)]
    return Run(
        path=None,
        status="completed",
        choices={"scheduler": scheduler},
        config=config,
        records=[{"step": 0, "runner/link_mbit": 1000.0}, *windows, *evals],
    )


def test_the_balanced_osp_table_shows_the_regime_and_the_seeds():
    runs = [_ps_run("ps_bsp", seed, 0.1, 0.9) for seed in (0, 1)]
    runs += [_ps_run("osp", seed, 0.05, 0.8 + seed / 10) for seed in (1, 0)]
    table = _osp_balanced_table(runs, 5)
    # 4 pushes + 4 pulls of 500 kB at 1 Gbit/s: 32 ms against 20 ms of compute.
    assert "link needs 32.0 ms" in table and "compute = 1.60" in table
    assert "until step 22" in table
    bsp, osp = (line for line in table.splitlines() if line.startswith(("| ps_bsp", "| osp")))
    # Iteration over all windows after step 5 (0.075 s), and after step 22 alone (0.05 s).
    assert osp.split(" | ")[1:6] == ["75.0", "1707", "1.33x", "50.0", "2.00x"]
    assert osp.split(" | ")[6:8] == ["85.00", "80.00 / 90.00"]  # per seed in seed order
    assert bsp.split(" | ")[3] == "1.00x"
