"""Every scheduler whose registry entry says it trains as the flat all-reduce does with
``compressor=none`` (``equals_allreduce``) and that runs on CUDA ends a ``gradsync run`` on
NCCL with the parameters of ``scheduler=allreduce`` (the list is read from the registry when
the tests are collected). Groups, the communication stream and its completion events change
when gradients travel, never what is applied: an update that read a bucket before its
all-reduce landed on the compute stream would show here. On one GPU this exercises every such
scheduler's CUDA path (its stream, events, profiling clocks); on two, exchanges in flight.

The model is digits' MLP widened to 4.3M parameters (17 MB), so that each scheduler's defaults
split it: DDP's bucket sizes (wfbp), 1M-element partitions under a 4M credit (bytescheduler,
several in flight), per-tensor groups (lags), merged groups (mgs, omgs, usbyte after
profiling). With two ranks each element of every sum is one addition whatever the grouping, so
the runs agree to float32 rounding (``assert_same_params``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from gradsync.schedulers.registry import SCHEDULERS
from tests.helpers.cli import assert_same_params, final_params, metrics, run_completed
from tests.helpers.gpu import REPRODUCIBLE_CUBLAS, on_gpus, on_one_and_two_gpus

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
CASES = on_one_and_two_gpus(CLAIMS)


def _run(cmd: list[str], env: dict[str, str], run_dir: Path, name: str, workers: int) -> Path:
    overrides = [*COMMON, *on_gpus(workers), f"scheduler={name}"]
    return run_completed(cmd, {**env, **REPRODUCIBLE_CUBLAS}, run_dir, *overrides)


@pytest.fixture(scope="module")
def flat(gradsync_cmd, module_cli_env, tmp_path_factory) -> Callable[[int], dict]:
    """The flat all-reduce's final parameters on ``workers`` GPUs (one run per count)."""
    runs: dict[int, dict[str, torch.Tensor]] = {}

    def params(workers: int) -> dict[str, torch.Tensor]:
        if workers not in runs:
            run_dir = tmp_path_factory.mktemp(f"allreduce{workers}") / "run"
            _run(gradsync_cmd, module_cli_env, run_dir, REFERENCE, workers)
            losses = [r["train/loss"] for r in metrics(run_dir) if "train/loss" in r]
            assert all(math.isfinite(loss) for loss in losses), losses
            assert losses[-1] < losses[0], "the reference did not learn"
            runs[workers] = final_params(run_dir)
        return runs[workers]

    return params


@pytest.mark.parametrize(("workers", "name"), CASES)
def test_scheduler_on_nccl_ends_where_the_flat_allreduce_does(
    gradsync_cmd, cli_env, tmp_path, flat, workers, name
):
    run_dir = _run(gradsync_cmd, cli_env, tmp_path / "run", name, workers)
    assert_same_params(final_params(run_dir), flat(workers))
