"""``gradsync run trainer.resume=DIR`` from a damaged checkpoint, as a user types it: exit 2,
one line that names the damaged file, no traceback, no worker started, nothing written next to
the checkpoint or in the working directory. (Each kind of damage, ``latest`` and the job's
identity are checked in-process: ``tests/unit/test_checkpoint_files.py``.)"""

from __future__ import annotations

import os
import subprocess

from gradsync.jobs.compose import compose_all
from gradsync.train.job_identity import job_identity
from tests.helpers.checkpoints import random_bytes, save_checkpoint, snapshot


def test_a_damaged_checkpoint_is_refused_in_one_line_before_any_worker_starts(
    gradsync_cmd, cli_env, tmp_path
):
    (job,) = compose_all([["trainer.workers=1"]])
    run_dir, cwd = tmp_path / "run", tmp_path / "cwd"
    saved = save_checkpoint(run_dir, workers=1, identity=job_identity(job))
    random_bytes(saved / "rank0.pt")
    cwd.mkdir()
    before = snapshot(run_dir)
    result = subprocess.run(
        [*gradsync_cmd, "run", "trainer.workers=1", f"trainer.resume={run_dir}"],
        cwd=cwd, env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert lines == [
        f"gradsync: error: checkpoint {saved}: rank0.pt is damaged (its checksum differs from "
        "manifest.json's); resume from an earlier run or start a new one"
    ]
    assert snapshot(run_dir) == before
    assert os.listdir(cwd) == []
