"""Mixed-precision training on GPUs: ``trainer.precision=bf16`` (autocast) and ``fp16``
(autocast with a gradient scaler) train the CNN on digits through ``gradsync run`` to the end,
with a finite training loss that falls: on one GPU, and on two, where the gradients autocast
produced (with fp16, scaled ones) are also exchanged. An fp16 overflow on one worker skips the
step on every worker, whether each worker has its GPU (NCCL) or 2 or 4 share one (gloo)."""

from __future__ import annotations

import math

import pytest
import torch

from gradsync.train.precision import LOSS_SCALE_METRIC
from tests.helpers.cli import final_params, metrics, run_completed
from tests.helpers.gpu import SHARING_ONE_GPU, Placement, needs_gpus, on_gpus, placed

FAULT_STEP, INITIAL_SCALE = 3, 65536.0

CASES = [
    pytest.param(workers, precision, marks=needs_gpus(workers), id=f"{precision}-{workers}gpu")
    for workers in (1, 2)
    for precision in ("bf16", "fp16")
]


@pytest.mark.parametrize(("workers", "precision"), CASES)
def test_mixed_precision_trains(gradsync_cmd, cli_env, tmp_path, workers, precision):
    run_dir = run_completed(
        gradsync_cmd,
        cli_env,
        tmp_path / "run",
        f"trainer.precision={precision}",
        "trainer.max_steps=100",
        "trainer.log_every=10",
        "trainer.checkpoint=false",
        *on_gpus(workers),
    )
    losses = [r["train/loss"] for r in metrics(run_dir) if "train/loss" in r]
    assert len(losses) == 10 and all(math.isfinite(loss) for loss in losses), losses
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.parametrize(
    ("placement", "scheduler"),
    placed(["allreduce", "wfbp"], placements=(Placement(2, 2), *SHARING_ONE_GPU)),
)
def test_an_fp16_overflow_on_one_worker_skips_the_step_on_every_worker(
    gradsync_cmd, cli_env, tmp_path, placement: Placement, scheduler
):
    """Rank 1's gradients hold an inf at step FAULT_STEP (``GRADSYNC_FAULT``); rank 0, whose
    scale and metrics the run logs, halves its scale there, which it does only on an overflow
    every worker agreed on, and no parameter takes the inf."""
    env = placement.env({**cli_env, "GRADSYNC_FAULT": f"1:{FAULT_STEP}:inf"})
    run_dir = run_completed(
        gradsync_cmd, env, tmp_path / "run", "model=mlp", "trainer.log_every=1",
        "trainer.precision=fp16", "compressor=topk", f"scheduler={scheduler}",
        "trainer.max_steps=6", *placement.overrides,
    )  # fmt: skip
    scales = {int(r["step"]): r[LOSS_SCALE_METRIC] for r in metrics(run_dir) if "train/loss" in r}
    # Logged after each step: the step numbered FAULT_STEP + 1 is the one that overflowed.
    assert scales == {
        s: INITIAL_SCALE if s <= FAULT_STEP else INITIAL_SCALE / 2 for s in range(1, 7)
    }
    assert all(torch.isfinite(v).all() for v in final_params(run_dir).values())
