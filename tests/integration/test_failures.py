"""A failing or dying worker takes the whole job down within seconds, naming its rank."""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.cli import metrics, run_cli, summary
from tests.helpers.datagen.images import write_cifar10
from tests.helpers.jobs import scratch_of, start_job, start_long_job, workers_of


def test_injected_failure_stops_the_job_and_names_the_rank(gradsync_cmd, cli_env, tmp_path):
    run_dir = tmp_path / "run"
    env = {**cli_env, "GRADSYNC_FAULT": "1:6"}
    started = time.monotonic()
    result = run_cli(
        gradsync_cmd,
        "run",
        "trainer.workers=3",
        "trainer.epochs=100",
        "trainer.log_every=2",
        f"hydra.run.dir={run_dir}",
        env=env,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "rank 1 failed: InjectedFault: injected failure at step 6" in last
    assert "[rank 1] " in result.stderr  # the rank's own traceback was forwarded
    assert elapsed < 60, f"took {elapsed:.0f} s to stop"  # 100 epochs would take minutes
    logged = metrics(run_dir)
    assert [r["step"] for r in logged] == [2, 4, 6]  # kept what was logged before the crash
    s = summary(run_dir)
    assert s["status"] == "failed" and s["exit_code"] == 1 and "rank 1" in s["error"]
    assert s["final"]["train/loss"] == logged[-1]["train/loss"]
    assert workers_of(run_dir) == {}


def test_a_setting_a_worker_meets_is_one_line_without_a_traceback(gradsync_cmd, cli_env, tmp_path):
    """CIFAR-10's size is known only once its batches are read, so the workers find that the
    20 training images of these files make no global batch of 2 × 16: each says so in one
    line, which is the job's failure, with no traceback anywhere."""
    data = write_cifar10(tmp_path / "data")
    run_dir = tmp_path / "run"
    result = run_cli(
        gradsync_cmd, "run", "dataset=cifar10", "model=cnn", *data, "trainer.batch_size=16",
        f"hydra.run.dir={run_dir}", env=cli_env,
    )  # fmt: skip
    assert result.returncode == 1
    expected = (
        r"gradsync: error: rank [01] failed: the training set has 20 samples, fewer than one "
        r"global batch of 32 \(trainer\.batch_size × trainer\.workers\): lower either"
    )
    assert re.match(expected, result.stderr.strip().splitlines()[-1]), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert summary(run_dir)["status"] == "failed"


def test_killed_worker_stops_the_job_within_seconds(gradsync_cmd, cli_env, tmp_path):
    """The killed rank is the cause; its peer, whose collective lost its partner, says so in
    one line (no backend traceback) unless the launcher stopped it first."""
    run_dir = tmp_path / "run"
    job, stderr = signal_a_worker(gradsync_cmd, cli_env, run_dir, rank=1, signum=signal.SIGKILL)
    assert job.returncode == 1
    assert stderr.strip().splitlines()[-1] == (
        f"gradsync: error: rank 1 failed: killed by SIGKILL (run dir: {run_dir})"
    )
    assert_peers_said_one_line(stderr, peers=[0])
    assert workers_of(run_dir) == {}
    s = summary(run_dir)
    assert s["status"] == "failed" and s["error"] == "rank 1 failed: killed by SIGKILL"


def signal_a_worker(
    gradsync_cmd, cli_env, run_dir: Path, *, rank: int, signum: int
) -> tuple[subprocess.Popen, str]:
    """A long two-worker job whose worker ``rank`` gets ``signum`` once both run: the job, ended
    within seconds, and its stderr."""
    job = start_long_job(gradsync_cmd, cli_env, run_dir)
    try:
        workers = workers_of(run_dir)
        assert set(workers) == {0, 1}
        os.kill(workers[rank], signum)
        sent = time.monotonic()
        _, stderr = job.communicate(timeout=30)
        assert time.monotonic() - sent < 10
    finally:
        if job.poll() is None:
            job.kill()
    return job, stderr


def assert_peers_said_one_line(stderr: str, *, peers: list[int]) -> None:
    """No traceback and no backend's dump: at most one line from each peer, its lost peer."""
    assert "Traceback" not in stderr and "GLHF" not in stderr, stderr
    assert "by peer" not in stderr.lower() and "frame #" not in stderr, stderr
    said = [line for line in stderr.splitlines() if "PeerLost" in line]
    expected = [
        f"[rank {rank}] PeerLost: lost its connection to a peer in a collective: another rank "
        "died or was stopped, or the network failed"
        for rank in peers
    ]
    assert set(said) <= set(expected) and len(said) == len(set(said)), stderr


def test_a_worker_sigint_terminates_the_job(gradsync_cmd, cli_env, tmp_path):
    """SIGINT sent to one worker (rank 0, which hosts the job's store), not to the command:
    the job ends within seconds as a SIGTERM to the command ends it (``terminated``: stopped
    from outside, not by the user at its terminal), naming the rank, with no traceback."""
    run_dir = tmp_path / "run"
    job, stderr = signal_a_worker(gradsync_cmd, cli_env, run_dir, rank=0, signum=signal.SIGINT)
    assert job.returncode == 143
    last = stderr.strip().splitlines()[-1]
    assert last == f"gradsync: error: rank 0 terminated by SIGINT (run dir: {run_dir})"
    assert_peers_said_one_line(stderr, peers=[1])
    assert workers_of(run_dir) == {}
    s = summary(run_dir)
    assert (s["status"], s["exit_code"], s["error"]) == (
        "terminated",
        143,
        "rank 0 terminated by SIGINT",
    )


def test_a_hung_worker_fails_the_job_after_the_comm_timeout(gradsync_cmd, cli_env, tmp_path):
    run_dir = tmp_path / "run"
    started = time.monotonic()
    result = run_cli(
        gradsync_cmd,
        "run",
        "trainer.comm_timeout_s=5",
        "trainer.max_steps=50",
        f"hydra.run.dir={run_dir}",
        env={**cli_env, "GRADSYNC_FAULT": "1:3:hang"},  # rank 1 stops responding at step 3
    )
    assert time.monotonic() - started < 60
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "gradsync: error: rank 0 failed: CommTimeout: no reply from a peer within "
            "trainer.comm_timeout_s=5 s"
        )
    )
    assert workers_of(run_dir) == {}


def test_sweep_continues_past_a_failed_job_and_marks_it(gradsync_cmd, cli_env, tmp_path):
    sweep = tmp_path / "sweep"
    env = {**cli_env, "GRADSYNC_FAULT": "1:3"}  # only a job with a rank 1 can fail
    result = run_cli(
        gradsync_cmd,
        "run",
        "-m",
        "experiment=smoke",
        "trainer.workers=2,1",
        f"hydra.sweep.dir={sweep}",
        env=env,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "gradsync: error: 1 of 2 jobs failed; see summary.csv"
    )
    rows = list(csv.DictReader((sweep / "summary.csv").open()))
    assert [(r["job"], r["status"]) for r in rows] == [("0", "failed"), ("1", "completed")]
    assert "rank 1 failed: InjectedFault" in rows[0]["error"]
    assert float(rows[1]["eval/accuracy"]) > 0.1


def test_sweep_with_one_invalid_value_fails_that_job_only(gradsync_cmd, cli_env, tmp_path):
    sweep = tmp_path / "sweep"
    result = run_cli(
        gradsync_cmd,
        "run",
        "-m",
        "experiment=smoke",
        "compressor=randomk",
        "compressor.density=0.1,2",
        f"hydra.sweep.dir={sweep}",
        env=cli_env,
    )
    assert result.returncode == 1
    assert "1 of 2 jobs have invalid values" in result.stderr
    rows = list(csv.DictReader((sweep / "summary.csv").open()))
    assert [(r["job"], r["status"]) for r in rows] == [("0", "completed"), ("1", "failed")]
    assert rows[1]["error"] == "compressor.density must be in (0, 1], got 2.0"
    assert not (sweep / "1" / "metrics.jsonl").exists()  # it never started


STOPS = [
    (signal.SIGINT, 130, "interrupted", "interrupted by the user"),  # Ctrl-C
    (signal.SIGTERM, 143, "terminated", "terminated by SIGTERM"),  # timeout, kill, scancel
]


@pytest.mark.parametrize(("signum", "code", "status", "reason"), STOPS, ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_stops_every_worker_and_records_it(
    gradsync_cmd, cli_env, tmp_path, signum, code, status, reason
):
    run_dir = tmp_path / "run"
    job = start_long_job(gradsync_cmd, cli_env, run_dir)
    scratch = scratch_of(run_dir)
    try:
        job.send_signal(signum)  # to the launcher, as Ctrl-C or `timeout` would
        stopped = time.monotonic()
        _, stderr = job.communicate(timeout=30)
        assert time.monotonic() - stopped < 15
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == code
    last = stderr.strip().splitlines()[-1]
    assert last == f"gradsync: error: {reason} (run dir: {run_dir})"
    assert "Traceback" not in stderr
    assert workers_of(run_dir) == {} and not scratch.exists()
    s = summary(run_dir)
    assert s["status"] == status and s["exit_code"] == code and s["error"] == reason
    # The last training record: an epoch of this job takes a fraction of a second, so the last
    # line may well be an evaluation's.
    losses = [r["train/loss"] for r in metrics(run_dir) if "train/loss" in r]
    assert losses and s["final"]["train/loss"] == losses[-1]


def test_sigterm_during_a_sweep_stops_it_and_summarizes_every_job(gradsync_cmd, cli_env, tmp_path):
    """Job 0 completes, job 1 is stopped while it trains, job 2 never starts."""
    sweep = tmp_path / "sweep"
    args = ["-m", "trainer.max_steps=4,100000,4", "trainer.epochs=500", f"hydra.sweep.dir={sweep}"]
    job = start_job(gradsync_cmd, cli_env, args, sweep / "1")
    try:
        job.send_signal(signal.SIGTERM)
        _, stderr = job.communicate(timeout=30)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 143
    errors = [line for line in stderr.splitlines() if line.startswith("gradsync: error:")]
    assert errors == [  # one line for the whole sweep
        "gradsync: error: terminated by SIGTERM; 1 of 3 jobs of the sweep completed; "
        f"see {sweep / 'summary.csv'}"
    ]
    rows = list(csv.DictReader((sweep / "summary.csv").open()))
    assert [(r["job"], r["status"]) for r in rows] == [
        ("0", "completed"),
        ("1", "terminated"),
        ("2", "missing"),
    ]
    assert workers_of(sweep / "1") == {}
    assert not (sweep / "2").exists()
