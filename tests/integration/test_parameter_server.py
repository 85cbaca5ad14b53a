"""Parameter-server schedulers through the CLI: real server processes beside the workers,
point-to-point pushes and pulls over gloo. BSP must train exactly as the all-reduce does (with
one server or a model sharded over two); SSP must never let a worker run more than its bound
ahead of a deliberate straggler, and ASP must not hold the fast workers back at all."""

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

COMMON = ["model=mlp", "trainer.max_steps=24", "trainer.log_every=8"]
MLP_BYTES = 4 * (64 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10)  # digits: 64 pixels, 10 classes


def _run(cmd: list[str], env: dict[str, str], run_dir: Path, *overrides: str) -> Path:
    return run_completed(cmd, env, run_dir, *COMMON, *overrides)


@pytest.fixture(scope="module")
def flat_params(gradsync_cmd, module_cli_env, tmp_path_factory) -> dict[str, torch.Tensor]:
    run_dir = tmp_path_factory.mktemp("allreduce") / "run"
    return final_params(_run(gradsync_cmd, module_cli_env, run_dir, "scheduler=allreduce"))


@pytest.mark.parametrize("servers", [1, 2])
def test_ps_bsp_trains_exactly_as_the_allreduce(
    gradsync_cmd, cli_env, tmp_path, flat_params, servers
):
    run_dir = _run(
        gradsync_cmd, cli_env, tmp_path / "run", "scheduler=ps_bsp", f"trainer.servers={servers}"
    )
    assert_same_params(final_params(run_dir), flat_params)
    windows = [r for r in metrics(run_dir) if "train/loss" in r]
    assert all(w["sched/staleness"] == 0 and w["sched/staleness_max"] == 0 for w in windows)
    assert all(time_parts_add_up(w) for w in windows)


def _staleness(cmd: list[str], env: dict[str, str], run_dir: Path, *overrides: str) -> list[dict]:
    slow = {**env, "GRADSYNC_SLOW": "2:0.05"}  # worker 2 takes 50 ms longer every step
    _run(
        cmd,
        slow,
        run_dir,
        "trainer.workers=3",
        "trainer.log_every=1",
        "trainer.max_steps=16",
        *overrides,
    )
    return [r for r in metrics(run_dir) if "sched/staleness" in r]


def test_ssp_never_runs_past_its_bound_and_asp_never_waits(gradsync_cmd, cli_env, tmp_path):
    ssp = _staleness(
        gradsync_cmd, cli_env, tmp_path / "ssp", "scheduler=ssp", "scheduler.staleness=2"
    )
    # Rank 0's lead over the straggler when it got its parameters: never past the bound, and
    # the bound is reached (rank 0 really was held back).
    assert max(r["sched/staleness"] for r in ssp) == 2
    assert max(r["sched/staleness_max"] for r in ssp) <= 2 + 1  # one push may be waiting
    asp = _staleness(gradsync_cmd, cli_env, tmp_path / "asp", "scheduler=asp")
    # Nobody waits for the straggler: rank 0 runs far ahead of it.
    assert max(r["sched/staleness"] for r in asp) > 2 + 1


def test_osp_without_unimportant_layers_trains_exactly_as_ps_bsp(gradsync_cmd, cli_env, tmp_path):
    """Past the two all-BSP epochs of its schedule, with the cap at 0, and with the schedule's
    own budget: the first equals ps_bsp, the second sends layers through ICS."""
    steps = ["trainer.max_steps=50", "trainer.log_every=10"]  # 22 steps an epoch: into epoch 3
    bsp = final_params(_run(gradsync_cmd, cli_env, tmp_path / "bsp", "scheduler=ps_bsp", *steps))
    capped = _run(
        gradsync_cmd, cli_env, tmp_path / "capped", "scheduler=osp",
        "scheduler.max_unimportant=0", *steps,
    )  # fmt: skip
    assert_same_params(final_params(capped), bsp)
    scheduled = _run(gradsync_cmd, cli_env, tmp_path / "osp", "scheduler=osp", *steps)
    windows = [r for r in metrics(scheduled) if "sched/rs_bytes" in r]
    assert windows[0]["sched/unimportant_fraction"] == 0  # epochs 0 and 1: pure BSP
    assert windows[-1]["sched/ics_bytes"] > 0 and windows[-1]["sched/unimportant_fraction"] > 0
    assert all(time_parts_add_up(w) for w in windows)


def test_workers_push_compressed_gradients_to_sharded_servers(gradsync_cmd, cli_env, tmp_path):
    """TernGrad pushes (2-bit codes and a scale per layer piece; the model's last layer in
    float, as TernGrad keeps it), decompressed on each server with the pusher's context."""
    run_dir = _run(
        gradsync_cmd, cli_env, tmp_path / "run", "scheduler=ps_bsp", "compressor=terngrad",
        "trainer.servers=2",
    )  # fmt: skip
    windows = [r for r in metrics(run_dir) if "train/loss" in r]
    dense = windows[0]["comm/bytes_sent"] * windows[0]["comm/compression_ratio"]
    assert all(w["comm/compression_ratio"] > 5 for w in windows)  # codes, not floats
    assert dense == pytest.approx(MLP_BYTES)
    assert windows[-1]["train/loss"] < windows[0]["train/loss"]
    assert windows[-1]["comm/error_norm"] == 0  # TernGrad is unbiased: no residual kept
