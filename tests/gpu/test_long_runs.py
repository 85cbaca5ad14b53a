"""200 steps of the schedulers whose compressors talk while they select, on GPUs (one worker per
GPU over NCCL, and 2 and 4 workers sharing one GPU over gloo): TernGrad's shared scalers under
LAGS (a group per tensor), top-k's union exchange under ByteScheduler (partitions in flight
under a credit) and the DEFT sparsifier under the DeFT scheduler (profiled, then delayed
buckets). Every collective of a step must come from the one communication thread in the same
order on every rank, or NCCL hangs (and gloo pairs the wrong messages); ``comm_timeout_s`` turns
such a hang into a failed run within half a minute (NCCL's watchdog, gloo's timeout), and the
command's own timeout is far above the tens of seconds a run takes.
"""

from __future__ import annotations

import pytest

from tests.helpers.cli import run_cli, summary
from tests.helpers.gpu import Placement, placed, trained_windows

STEPS = 200
COMMON = [
    f"trainer.max_steps={STEPS}",
    "trainer.epochs=1000",
    "trainer.log_every=20",
    "trainer.checkpoint=false",
    "trainer.comm_timeout_s=30",
]
PAIRS = {
    "terngrad-lags": ["compressor=terngrad", "scheduler=lags"],
    "topk_union-bytescheduler": [
        "compressor=topk",
        "compressor.exchange=union",
        "scheduler=bytescheduler",
        "scheduler.partition_size=2000",
        "scheduler.credit=5000",
    ],
    "deft-deft": [
        "compressor=deft",
        "scheduler=deft",
        "scheduler.partition_size=5000",
        "scheduler.profile_steps=3",
    ],
}
CASES = placed(PAIRS)


@pytest.mark.parametrize(("placement", "pair"), CASES)
def test_long_run_completes_without_hanging(
    gradsync_cmd, cli_env, tmp_path, placement: Placement, pair
):
    run_dir = tmp_path / "run"
    overrides = [*PAIRS[pair], *COMMON, *placement.overrides, f"hydra.run.dir={run_dir}"]
    result = run_cli(gradsync_cmd, "run", *overrides, env=placement.env(cli_env), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert summary(run_dir)["status"] == "completed"
    trained_windows(run_dir, STEPS)
