"""ByteScheduler and US-Byte through the CLI, as a user runs them: two workers on real gloo, an
evaluation (which flushes the updates still in flight) in the middle, the schedulers' metrics
in the logs, and the same final parameters as the flat all-reduce."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.cli import (
    assert_same_params,
    final_params,
    metrics,
    run_completed,
    time_parts_add_up,
)

COMMON = ["model=mlp", "trainer.max_steps=24", "trainer.log_every=8", "trainer.workers=2"]
MLP_ELEMENTS = 64 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10  # digits: 64 pixels, 10 classes
SCHEDULERS = {
    "bytescheduler": [
        "scheduler=bytescheduler",
        "scheduler.partition_size=2000",
        "scheduler.credit=5000",
    ],
    "usbyte": [
        "scheduler=usbyte",
        "scheduler.min_partition_size=500",
        "scheduler.max_partition_size=4000",
        "scheduler.profile_steps=2",
    ],
}


def _run(cmd: list[str], env: dict[str, str], run_dir: Path, *overrides: str) -> Path:
    return run_completed(cmd, env, run_dir, *overrides, *COMMON)


@pytest.fixture(scope="module")
def flat_params(gradsync_cmd, module_cli_env, tmp_path_factory) -> dict[str, torch.Tensor]:
    run_dir = tmp_path_factory.mktemp("allreduce") / "run"
    return final_params(_run(gradsync_cmd, module_cli_env, run_dir, "scheduler=allreduce"))


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_priority_scheduler_trains_logs_and_matches_the_flat_allreduce(
    gradsync_cmd, cli_env, tmp_path, flat_params, name
):
    run_dir = _run(gradsync_cmd, cli_env, tmp_path / "run", *SCHEDULERS[name])
    records = metrics(run_dir)
    windows = [r for r in records if "train/loss" in r]
    assert len(windows) == 3
    assert any("eval/accuracy" in r for r in records)
    for window in windows:
        assert window["sched/partitions"] > 1
        assert window["sched/credit"] > 0 and window["sched/late_updates"] == 0
        assert window["comm/bytes_sent"] == MLP_ELEMENTS * 4  # float32, every element once
        assert window["comm/density_actual"] == 1.0
        assert time_parts_add_up(window)  # waits in forward hooks are not also forward time
    if name == "usbyte":
        # Steps 0-2 profile (a warm-up step and two measured ones), then the plan is used.
        assert windows[0]["sched/profiling"] == pytest.approx(3 / 8)
        assert windows[-1]["sched/profiling"] == 0.0 and windows[-1]["sched/model_iter_s"] > 0
        assert "usbyte: " in (run_dir / "train.log").read_text()
    assert_same_params(final_params(run_dir), flat_params)
