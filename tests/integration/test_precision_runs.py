"""``gradsync run trainer.precision=...`` end to end: real workers, real gloo, real data.

bf16 trains under CPU autocast, here with parameter servers (the schedulers without servers are
trained under bf16 in ``tests/dist/test_bf16_schedulers.py``). fp16 (CPU autocast supports
float16 too) survives a step whose gradients overflow on one worker
(``GRADSYNC_FAULT=1:step:inf``): the scale halves there and training goes on; a run resumed
from its checkpoint continues with the scale it had. On a machine with CUDA, both train on the
GPU as well.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from gradsync.train.precision import LOSS_SCALE_METRIC
from tests.helpers.cli import metrics, run_cli, run_completed
from tests.integration.test_cli_run import METRIC_NAMES

SMALL = ("model=mlp", "trainer.log_every=1")
FAULT_STEP, INITIAL_SCALE = 3, 65536.0
GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _training(run_dir: Path) -> list[dict[str, float]]:
    return [r for r in metrics(run_dir) if "train/loss" in r]


def test_bf16_trains_end_to_end(gradsync_cmd, cli_env, tmp_path):
    run_dir = run_completed(
        gradsync_cmd, cli_env, tmp_path / "run", *SMALL, "trainer.precision=bf16",
        "scheduler=ps_bsp", "trainer.max_steps=20", "trainer.checkpoint=false",
    )  # fmt: skip
    records = _training(run_dir)
    assert len(records) == 20 and all(set(r) >= METRIC_NAMES for r in records)
    losses = [r["train/loss"] for r in records]
    assert all(math.isfinite(loss) for loss in losses)
    assert sum(losses[-5:]) < sum(losses[:5])
    assert all(LOSS_SCALE_METRIC not in r for r in records)  # bf16 needs no loss scale


def _scales(run_dir: Path) -> dict[int, float]:
    return {int(r["step"]): r[LOSS_SCALE_METRIC] for r in _training(run_dir)}


def test_fp16_skips_an_overflowing_step_and_resumes_with_its_scale(gradsync_cmd, cli_env, tmp_path):
    overrides = (*SMALL, "trainer.precision=fp16", "compressor=topk", "scheduler=wfbp")
    env = {**cli_env, "GRADSYNC_FAULT": f"1:{FAULT_STEP}:inf"}  # rank 1 overflows once
    first = run_completed(gradsync_cmd, env, tmp_path / "first", *overrides, "trainer.max_steps=6")
    # Logged after each step: the step numbered FAULT_STEP + 1 is the one that overflowed.
    halved = {s: INITIAL_SCALE if s <= FAULT_STEP else INITIAL_SCALE / 2 for s in range(1, 7)}
    assert _scales(first) == halved
    assert all(math.isfinite(r["train/loss"]) for r in _training(first))
    saved = first / "checkpoints" / (first / "checkpoints" / "latest").read_text().strip()
    common = torch.load(saved / "common.pt", weights_only=False)
    assert common["precision"]["loss_scale"]["scale"] == INITIAL_SCALE / 2
    for rank in (0, 1):  # CPU workers: the CPU generator's state, no GPU's
        assert set(torch.load(saved / f"rank{rank}.pt", weights_only=False)) == {"sync", "rng"}
    resumed = run_completed(
        gradsync_cmd, cli_env, tmp_path / "resumed", *overrides, "trainer.max_steps=8",
        f"trainer.resume={first}",
    )  # fmt: skip
    assert _scales(resumed) == {7: INITIAL_SCALE / 2, 8: INITIAL_SCALE / 2}


def test_fp16_with_a_scheduler_that_cannot_skip_is_one_line(gradsync_cmd, cli_env, tmp_path):
    result = run_cli(
        gradsync_cmd, "run", "scheduler=asp", "trainer.precision=fp16",
        f"hydra.run.dir={tmp_path / 'run'}", env=cli_env,
    )  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("gradsync: error: scheduler=asp") and "trainer.precision=bf16" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("precision", [pytest.param(p, marks=GPU) for p in ("bf16", "fp16")])
def test_mixed_precision_trains_on_cuda(gradsync_cmd, cli_env, tmp_path, precision):
    workers = min(2, torch.cuda.device_count())
    run_dir = run_completed(
        gradsync_cmd, cli_env, tmp_path / "run", *SMALL, "trainer.device=cuda",
        f"trainer.workers={workers}", f"trainer.precision={precision}", "trainer.max_steps=20",
    )  # fmt: skip
    losses = [r["train/loss"] for r in _training(run_dir)]
    assert len(losses) == 20 and all(math.isfinite(loss) for loss in losses)
    assert sum(losses[-5:]) < sum(losses[:5])
