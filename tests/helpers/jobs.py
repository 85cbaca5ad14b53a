"""Long-running CLI jobs for the tests that stop them, and the worker processes they start."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.helpers.cli import metrics


def workers_of(run_dir: Path) -> dict[int, int]:
    """{rank: pid} of live worker processes of this run (read from /proc)."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gradsync.train.worker" in cmdline and str(run_dir).encode() in cmdline:
            env = dict(e.split(b"=", 1) for e in environ if b"=" in e)
            found[int(env[b"RANK"])] = int(proc.name)
    return found


def start_long_job(
    gradsync_cmd: list[str], env: dict[str, str], run_dir: Path, *overrides: str
) -> subprocess.Popen:
    """A 2-worker job that would train for minutes, returned once it has logged a step."""
    job = subprocess.Popen(
        [
            *gradsync_cmd,
            "run",
            "trainer.workers=2",
            "trainer.epochs=500",
            "trainer.log_every=1",
            "trainer.checkpoint=false",
            f"hydra.run.dir={run_dir}",
            *overrides,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (run_dir / "metrics.jsonl").exists() or not metrics(run_dir):
        if job.poll() is not None:
            raise AssertionError(job.communicate()[1])
        if time.monotonic() > deadline:
            job.kill()
            raise AssertionError("the job never started training")
        time.sleep(0.2)
    return job
