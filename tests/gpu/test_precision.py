"""Mixed-precision training on GPUs: ``trainer.precision=bf16`` (autocast) and ``fp16``
(autocast with a gradient scaler) train the CNN on digits through ``gradsync run`` to the end,
with a finite training loss that falls: on one GPU, and on two, where the gradients autocast
produced (with fp16, scaled ones) are also exchanged."""

from __future__ import annotations

import math

import pytest

from tests.helpers.cli import metrics, run_completed
from tests.helpers.gpu import needs_gpus, on_gpus

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
