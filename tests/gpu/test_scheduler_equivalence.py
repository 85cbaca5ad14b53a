"""Every scheduler whose registry entry says it trains as the flat all-reduce does with
``compressor=none`` (``equals_allreduce``) and that runs on CUDA ends a ``gradsync run`` on
CUDA with the parameters of ``scheduler=allreduce`` (the list is read from the registry when
the tests are collected): one worker per GPU over NCCL, and 2 and 4 workers sharing one GPU
over gloo. Groups, the communication stream and its completion events change
when gradients travel, never what is applied: an update that read a bucket before its
all-reduce landed on the compute stream would show here. On one GPU this exercises every such
scheduler's CUDA path (its stream, events, profiling clocks); on two, exchanges in flight.

The model is digits' MLP widened to 4.3M parameters (17 MB), so that each scheduler's defaults
split it: DDP's bucket sizes (wfbp), 1M-element partitions under a 4M credit (bytescheduler,
several in flight), per-tensor groups (lags), merged groups (mgs, omgs, usbyte after
profiling). With two ranks each element of every sum is one addition whatever the grouping, so
the runs agree to float32 rounding (``assert_same_params``). With four, gloo's ring sums an
element in an order that depends on where it falls in its message, so the grouping changes the
rounding of each step's sum, and 30 steps carry it further: a tolerance ten times wider.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from gradsync.schedulers.registry import SCHEDULERS
from tests.helpers.cli import assert_same_params, final_params, metrics, run_completed
from tests.helpers.gpu import REPRODUCIBLE_CUBLAS, Placement, placed

REFERENCE = "allreduce"
CLAIMS = [
    name
    for name, spec in SCHEDULERS.items()
    if name != REFERENCE
    and spec.capabilities.equals_allreduce
    and "cuda" in spec.capabilities.devices
]
COMMON = [
    "model=mlp",
    "model.hidden=[2048,2048]",
    "compressor=none",
    "trainer.max_steps=30",
    "trainer.log_every=10",
]
CASES = placed(CLAIMS)


def _run(cmd: list[str], env: dict[str, str], run_dir: Path, name: str, at: Placement) -> Path:
    overrides = [*COMMON, *at.overrides, f"scheduler={name}"]
    return run_completed(cmd, at.env({**env, **REPRODUCIBLE_CUBLAS}), run_dir, *overrides)


@pytest.fixture(scope="module")
def flat(gradsync_cmd, module_cli_env, tmp_path_factory) -> Callable[[Placement], dict]:
    """The flat all-reduce's final parameters at a placement (one run per placement)."""
    runs: dict[Placement, dict[str, torch.Tensor]] = {}

    def params(at: Placement) -> dict[str, torch.Tensor]:
        if at not in runs:
            run_dir = tmp_path_factory.mktemp(f"allreduce{at.id}") / "run"
            _run(gradsync_cmd, module_cli_env, run_dir, REFERENCE, at)
            losses = [r["train/loss"] for r in metrics(run_dir) if "train/loss" in r]
            assert all(math.isfinite(loss) for loss in losses), losses
            assert losses[-1] < losses[0], "the reference did not learn"
            runs[at] = final_params(run_dir)
        return runs[at]

    return params


@pytest.mark.parametrize(("placement", "name"), CASES)
def test_scheduler_on_cuda_ends_where_the_flat_allreduce_does(
    gradsync_cmd, cli_env, tmp_path, flat, placement, name
):
    run_dir = _run(gradsync_cmd, cli_env, tmp_path / "run", name, placement)
    atol = 1e-6 if placement.workers <= 2 else 1e-5
    assert_same_params(final_params(run_dir), flat(placement), atol=atol)
