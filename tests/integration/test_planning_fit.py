"""OMGS's in-place fit replayed for a prediction (``measure/planning.py``): the job's own
planning steps run for real on shaped links, and only jobs that fit in place are replayed."""

from __future__ import annotations

import json

import pytest

from gradsync.cluster.host_checks import missing_netem_requirement
from gradsync.jobs.compose import compose_jobs
from gradsync.measure.planning import fits_here, planning_fit

pytestmark = pytest.mark.skipif(
    missing_netem_requirement() is not None, reason=str(missing_netem_requirement())
)
JOB = [
    "model=mlp", "trainer.workers=2", "trainer.log_every=2",
    "compressor=topk", "compressor.exchange=allgather",
]  # fmt: skip
SHAPED = ["runner=netem", "runner.bandwidth=100mbit"]


def _job(*overrides: str, runner: tuple[str, ...] = tuple(SHAPED), scheduler: str = "omgs"):
    planner = ["scheduler=omgs", "scheduler.profile_steps=1"] if scheduler == "omgs" else []
    (cfg,) = compose_jobs(
        [*JOB, *runner, *(planner or [f"scheduler={scheduler}"]), *overrides],
        multirun=False,
        launcher_here=False,
    )
    return cfg


def test_the_planning_steps_of_the_real_job_give_its_fit():
    cfg = _job()
    assert fits_here("omgs", cfg)
    fit = planning_fit(cfg)
    assert set(fit) == {"gamma", "delta", "alpha", "beta"}
    # β > 0 always: a fit with bytes for free makes the job measure the link instead.
    assert fit["gamma"] >= 0 and fit["alpha"] >= 0 and fit["beta"] > 0
    assert fit["delta"] > 0  # every group costs the engine some work, if only its write-back


@pytest.mark.parametrize(
    ("scheduler", "job"),
    [
        ("omgs", lambda costs: _job("compressor.exchange=union")),  # all-reduced: microbenchmarked
        ("omgs", lambda costs: _job(runner=("runner=local",))),  # no shaper to distort the fit
        ("omgs", lambda costs: _job(f"scheduler.costs={costs}")),  # given its costs, fits none
        ("mgs", lambda costs: _job(scheduler="mgs")),  # plans by size
    ],
    ids=["allreducible", "unshaped", "costs-given", "not-omgs"],
)
def test_only_jobs_that_fit_on_shaped_links_are_replayed(scheduler, job, tmp_path):
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"gamma": 1e-3, "alpha": 1e-4, "beta": 1e-8}))
    assert not fits_here(scheduler, job(costs))
