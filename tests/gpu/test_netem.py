"""``runner=netem`` with GPU workers: they compute on the GPU and talk gloo over the shaped veth
links, so a one-GPU machine puts GPU compute behind an emulated network.

- The link probe (an all-reduce over the default group) runs at the shaped rate, the same
  check as the CPU runs' (``tests/integration/test_netem_runs.py``), and the job says once how
  its workers share the GPU.
- WFBP's overlap holds behind the link: its wait after backward (``time/comm``) is at most 0.7
  of the same exchange timed alone (``scheduler=allreduce``), as the two-GPU test on NCCL asks
  (``test_overlap.py``). ResNet-20 (1.1 MB of gradient: about 9 ms at 1 Gbit/s) at batch 1024,
  two workers sharing one GPU, buckets of 0.25 MiB: backward on the GPU takes about as long as
  the exchange, so WFBP can hide all but its last bucket. (The same comparison on two CPU cores
  at batch 32, where backward is far longer than the exchange, came out at 0.44.)
"""

from __future__ import annotations

import statistics

import pytest

from gradsync.cluster.host_checks import missing_netem_requirement
from tests.helpers.cli import metrics, run_cli, summary
from tests.helpers.gpu import Placement, needs_gpus

pytestmark = [
    needs_gpus(1),
    pytest.mark.skipif(
        missing_netem_requirement() is not None, reason=str(missing_netem_requirement())
    ),
]

SHARING = Placement(workers=2, gpus=1)
LINK = ["runner=netem", "runner.bandwidth=1gbit"]
WARM_UP_WINDOWS = 2
HIDDEN_AT_LEAST = 0.3


def _run(cmd: list[str], env: dict[str, str], run_dir, *overrides: str) -> str:
    """A netem job of SHARING's workers on one GPU; its output."""
    result = run_cli(
        cmd, "run", *LINK, *SHARING.overrides, *overrides, "trainer.checkpoint=false",
        f"hydra.run.dir={run_dir}", env=SHARING.env(env), timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert summary(run_dir)["status"] == "completed"
    return result.stdout + result.stderr


def test_gpu_workers_talk_over_the_shaped_link(gradsync_cmd, cli_env, tmp_path):
    output = _run(gradsync_cmd, cli_env, tmp_path / "run", "trainer.max_steps=10")
    first = next(m for m in metrics(tmp_path / "run") if "runner/link_mbit" in m)
    assert first["runner/link_mbit"] == 1000.0
    assert 500 < first["runner/probe_mbit"] < 1100, first
    shared = [line for line in output.splitlines() if "workers share 1 GPU(s)" in line]
    assert len(shared) == 1 and "go over gloo" in shared[0], output[-2000:]


def _comm_per_step(cmd: list[str], env: dict[str, str], run_dir, *overrides: str) -> float:
    job = ["model=resnet20", "dataset=synthetic", "trainer.batch_size=1024"]
    _run(cmd, env, run_dir, *job, "trainer.max_steps=60", "trainer.log_every=5", *overrides)
    windows = [r for r in metrics(run_dir) if "train/loss" in r][WARM_UP_WINDOWS:]
    assert len(windows) >= 5, windows
    return statistics.median(w["time/comm"] for w in windows)


def test_wfbp_hides_the_exchange_behind_backward_at_1_gbit(gradsync_cmd, cli_env, tmp_path):
    alone = _comm_per_step(gradsync_cmd, cli_env, tmp_path / "allreduce", "scheduler=allreduce")
    buckets = ["scheduler=wfbp", "scheduler.bucket_mb=0.25", "scheduler.first_bucket_mb=0.1"]
    waited = _comm_per_step(gradsync_cmd, cli_env, tmp_path / "wfbp", *buckets)
    assert alone > 0
    assert waited <= (1 - HIDDEN_AT_LEAST) * alone, (
        f"wfbp waited {waited * 1e3:.2f} ms per step after backward; the exchange alone takes "
        f"{alone * 1e3:.2f} ms"
    )
