"""200 steps of the schedulers whose compressors talk while they select, on NCCL: TernGrad's
shared scalers under LAGS (a group per tensor), top-k's union exchange under ByteScheduler
(partitions in flight under a credit) and the DEFT sparsifier under the DeFT scheduler
(profiled, then delayed buckets). Every collective of a step must come from the one
communication thread in the same order on every rank, or NCCL hangs; ``comm_timeout_s`` turns
such a hang into a failed run within half a minute (NCCL's watchdog), and the command's own
timeout is far above the tens of seconds a run takes. On one GPU the same runs check the CUDA
path of these compressors and schedulers.
"""

from __future__ import annotations

import pytest

from tests.helpers.cli import run_cli, summary
from tests.helpers.gpu import on_gpus, on_one_and_two_gpus, trained_windows

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
CASES = on_one_and_two_gpus(PAIRS)


@pytest.mark.parametrize(("workers", "pair"), CASES)
def test_long_run_completes_without_hanging(gradsync_cmd, cli_env, tmp_path, workers, pair):
    run_dir = tmp_path / "run"
    overrides = [*PAIRS[pair], *COMMON, *on_gpus(workers), f"hydra.run.dir={run_dir}"]
    result = run_cli(gradsync_cmd, "run", *overrides, env=cli_env, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert summary(run_dir)["status"] == "completed"
    trained_windows(run_dir, STEPS)
