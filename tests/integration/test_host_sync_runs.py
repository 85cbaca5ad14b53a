"""``trainer.check_host_syncs_from`` in a real ``gradsync run``: the parameter-server schedulers,
whose servers ``tests/dist/test_host_syncs.py`` cannot start, wait on the host only where they
and their compressor declare. On the CPU the declared points are counted and checked; on a GPU
(marked ``gpu``) every other host synchronization fails the step."""

from __future__ import annotations

import re
import subprocess

import pytest

from gradsync.schedulers.registry import SCHEDULERS
from tests.helpers.gpu import needs_gpus, on_gpus

SERVERS = [name for name, spec in SCHEDULERS.items() if spec.capabilities.parameter_server]
CHECKED = ["trainer.check_host_syncs_from=2", "trainer.max_steps=6", "trainer.checkpoint=false"]
PASSED = re.compile(r"host syncs from step 2: (.+)")


def _run(gradsync_cmd, tmp_path, *overrides: str) -> set[str]:
    result = subprocess.run(
        [*gradsync_cmd, "run", *overrides, *CHECKED, f"hydra.run.dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    train_log = (tmp_path / "train.log").read_text()
    found = PASSED.search(train_log)
    assert found, train_log[-2000:]
    return {seen.split(" ×")[0] for seen in found[1].split(", ") if seen != "none"}


def test_a_parameter_server_worker_waits_only_at_the_declared_staging(gradsync_cmd, tmp_path):
    # union top-k agrees on its indices (a declared point of the compressor's) before pushing.
    passed = _run(gradsync_cmd, tmp_path, "scheduler=ps_bsp", "compressor=topk")
    assert passed == {point for point, _ in SCHEDULERS["ps_bsp"].capabilities.host_syncs} | {
        "union.indices"
    }


@needs_gpus(1)
@pytest.mark.parametrize("scheduler", SERVERS)
def test_gpu_workers_of_parameter_servers_sync_only_where_declared(
    gradsync_cmd, tmp_path, scheduler
):
    _run(gradsync_cmd, tmp_path, f"scheduler={scheduler}", *on_gpus(1))
