"""Long-running CLI jobs for the tests that stop them, and the worker processes they start."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.helpers.cli import metrics


def _environ(pid: int | str) -> dict[bytes, bytes]:
    entries = (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
    return dict(entry.split(b"=", 1) for entry in entries if b"=" in entry)


def workers_of(run_dir: Path) -> dict[int, int]:
    """{rank: pid} of live worker processes of this run (read from /proc)."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            if b"gradsync.train.worker" in cmdline and str(run_dir).encode() in cmdline:
                found[int(_environ(proc.name)[b"RANK"])] = int(proc.name)
        except OSError:
            continue
    return found


def scratch_of(run_dir: Path) -> Path:
    """The launcher's scratch directory of a running job (where its workers leave error
    reports), read from rank 0's environment."""
    return Path(_environ(workers_of(run_dir)[0])[b"GRADSYNC_ERROR_FILE"].decode()).parent


def start_long_job(
    gradsync_cmd: list[str], env: dict[str, str], run_dir: Path, *overrides: str
) -> subprocess.Popen:
    """A 2-worker job that would train for minutes, returned once it has logged a step."""
    args = ["trainer.workers=2", "trainer.epochs=500", f"hydra.run.dir={run_dir}", *overrides]
    return start_job(gradsync_cmd, env, args, run_dir)


def start_job(
    gradsync_cmd: list[str], env: dict[str, str], args: list[str], training: Path
) -> subprocess.Popen:
    """``gradsync run ARGS`` (logging every step, no checkpoints), returned once the run in
    ``training`` has logged a step."""
    job = subprocess.Popen(
        [*gradsync_cmd, "run", "trainer.log_every=1", "trainer.checkpoint=false", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (training / "metrics.jsonl").exists() or not metrics(training):
        if job.poll() is not None:
            raise AssertionError(job.communicate()[1])
        if time.monotonic() > deadline:
            job.kill()
            raise AssertionError("the job never started training")
        time.sleep(0.2)
    return job
