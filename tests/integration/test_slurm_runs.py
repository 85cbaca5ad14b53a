"""Sweeps on a real Slurm (slurmctld + slurmd + munge, started for these tests): through
``runner=slurm`` (one job array via Hydra's submitit launcher, workers started by srun) and
through the plain sbatch scripts in ``scripts/slurm/``. Both write the same run directories
and summary.csv as a local sweep; a job that fails is reported as failed, with its log."""

from __future__ import annotations

import csv
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gradsync.report.runs import find_runs
from tests.conftest import REPO
from tests.helpers import slurm
from tests.helpers.cli import metrics, run_cli, summary

pytestmark = pytest.mark.skipif(slurm.missing() is not None, reason=str(slurm.missing()))

SWEEP = ["compressor=none,topk", "trainer.workers=1,2", "trainer.max_steps=5"]
JOBS = [(c, w) for c in ("none", "topk") for w in (1, 2)]
# The sbatch path runs the same jobs through other scripts: two of them are enough there.
SMALL_SWEEP = ["compressor=none,topk", "trainer.workers=2", "trainer.max_steps=5"]
SMALL_JOBS = [("none", 2), ("topk", 2)]


@pytest.fixture(scope="module")
def slurm_env(module_cli_env, tmp_path_factory):
    with slurm.LocalSlurm(tmp_path_factory.mktemp("slurm")) as env:
        yield {**module_cli_env, "SLURM_CONF": env["SLURM_CONF"]}


def _rows(sweep_dir: Path) -> list[dict[str, str]]:
    return list(csv.DictReader((sweep_dir / "summary.csv").open()))


def _check_finished_sweep(sweep_dir: Path, jobs: list[tuple[str, int]] = JOBS) -> None:
    rows = _rows(sweep_dir)
    assert [r["status"] for r in rows] == ["completed"] * len(jobs), [r["error"] for r in rows]
    for row, (compressor, workers) in zip(rows, jobs, strict=True):
        assert f"compressor={compressor}" in row["overrides"]
        assert f"trainer.workers={workers}" in row["overrides"]
        final = summary(Path(row["run_dir"]))["final"]
        # One worker all-reduces with nobody: no bytes cross a wire.
        assert (final["comm/bytes_wire"] > 0) == (workers == 2)


def test_sweep_through_runner_slurm(gradsync_cmd, slurm_env, tmp_path):
    sweep_dir = tmp_path / "sweep"
    result = run_cli(
        gradsync_cmd, "run", "-m", "runner=slurm", *SWEEP, f"hydra.sweep.dir={sweep_dir}",
        env=slurm_env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    _check_finished_sweep(sweep_dir)
    assert list((sweep_dir / ".submitit").iterdir())  # it really went through Slurm


def test_resources_slurm_refuses_are_one_line_before_anything_is_written(
    gradsync_cmd, slurm_env, tmp_path
):
    sweep_dir = tmp_path / "sweep"
    result = run_cli(
        gradsync_cmd, "run", "runner=slurm", "runner.partition=nope", "trainer.max_steps=5",
        f"hydra.sweep.dir={sweep_dir}", env=slurm_env,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith("gradsync: error: Slurm refuses the jobs' resources: ")
    assert "invalid partition" in result.stderr and "runner.partition" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not sweep_dir.exists()


def test_sweep_through_the_sbatch_scripts(gradsync_cmd, slurm_env, tmp_path):
    sweep_dir = tmp_path / "sweep"
    # The scripts call `gradsync` from PATH, as on a cluster where it is installed.
    env = {
        **slurm_env,
        "PATH": f"{Path(sys.executable).parent}:{slurm_env['PATH']}",
        "GRADSYNC_POLL_S": "1",  # a test need not be gentle with its private slurmctld
    }
    result = subprocess.run(
        [str(REPO / "scripts" / "slurm" / "submit.sh"), str(sweep_dir), "--", *SMALL_SWEEP],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert (sweep_dir / "jobs.txt").read_text().count("\n") == 2
    _check_finished_sweep(sweep_dir, SMALL_JOBS)
    # The array's directory reports like a local sweep (its slurm.out files are not runs).
    result = run_cli(gradsync_cmd, "report", str(sweep_dir), env=slurm_env)
    assert result.returncode == 0, result.stderr
    report = list(csv.DictReader((sweep_dir / "report" / "report.csv").open()))
    assert [(r["compressor"], r["status"]) for r in report] == [
        (c, "completed") for c, _ in SMALL_JOBS
    ]


def test_a_failing_job_is_reported_with_its_log_while_the_others_finish(
    gradsync_cmd, slurm_env, tmp_path
):
    sweep_dir = tmp_path / "sweep"
    result = run_cli(
        gradsync_cmd, "run", "-m", "runner=slurm", "trainer.workers=2,1", "trainer.max_steps=6",
        f"hydra.sweep.dir={sweep_dir}",
        env={**slurm_env, "GRADSYNC_FAULT": "1:3"},  # only a job with a rank 1 can fail
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "gradsync: error: 1 of 2 jobs failed; see summary.csv"
    )
    failed, finished = _rows(sweep_dir)
    assert finished["status"] == "completed"
    assert failed["status"] == "failed"
    assert failed["error"].startswith("rank 1 failed: InjectedFault: injected failure at step 3")
    log = failed["error"].split("(Slurm log: ")[1].rstrip(")")
    assert "InjectedFault" in Path(log).read_text()


def _slurm(env: dict[str, str], *argv: str) -> str:
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout


def test_a_requeued_job_resumes_from_its_last_checkpoint(gradsync_cmd, slurm_env, tmp_path):
    sweep_dir = tmp_path / "sweep"
    job = subprocess.Popen(
        [*gradsync_cmd, "run", "runner=slurm", "trainer.epochs=8", f"hydra.sweep.dir={sweep_dir}"],
        env=slurm_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (sweep_dir / "0" / "checkpoints" / "latest").is_file():
            assert time.monotonic() < deadline and job.poll() is None, "no checkpoint was saved"
            time.sleep(0.2)
        (slurm_id,) = _slurm(slurm_env, "squeue", "-h", "-o", "%i").split()
        _slurm(slurm_env, "scontrol", "requeue", slurm_id)  # what preemption does
        while not _slurm(slurm_env, "squeue", "-h", "-j", slurm_id, "-o", "%T").startswith(
            "PENDING"
        ):
            time.sleep(0.2)
        # Slurm holds a requeued job for two minutes; let it start now.
        _slurm(slurm_env, "scontrol", "update", f"JobId={slurm_id}", "StartTime=now")
        _, stderr = job.communicate(timeout=240)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, stderr
    run = sweep_dir / "0"
    assert summary(run)["status"] == "completed"
    assert summary(run)["final"]["epoch"] == 8  # all of it, across the two runs
    assert "restarted by the scheduler: resuming from" in (run / "train.log").read_text()
    worker_logs = "".join(p.read_text() for p in (sweep_dir / ".submitit").glob("*/*_log.out"))
    assert "resumed from" in worker_logs  # the worker loaded the checkpoint, not a fresh model
    # Both attempts appended to one metrics.jsonl; the report reads them as one history.
    # (The restart is proven above; this checks the two attempts read as one history.)
    logged = [r["step"] for r in metrics(run) if "train/loss" in r]
    (reported,) = find_runs([sweep_dir])
    steps = [r["step"] for r in reported.records if "train/loss" in r]
    elapsed = [r["time/elapsed"] for r in reported.records]
    assert steps == sorted(set(logged)) and elapsed == sorted(elapsed)


def test_a_parameter_server_job_gets_its_server_task(gradsync_cmd, slurm_env, tmp_path):
    """Two workers and one server: three srun tasks, the third of which serves."""
    sweep_dir = tmp_path / "sweep"
    result = run_cli(
        gradsync_cmd, "run", "-m", "runner=slurm", "scheduler=ssp", "trainer.workers=2",
        "trainer.max_steps=5", f"hydra.sweep.dir={sweep_dir}", env=slurm_env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (row,) = _rows(sweep_dir)
    assert row["status"] == "completed", row["error"]
    windows = [r for r in metrics(Path(row["run_dir"])) if "sched/staleness" in r]
    assert windows and all(w["sched/staleness"] <= 3 for w in windows)  # ssp's bound
    assert all(w["comm/bytes_sent"] > 0 for w in windows)  # pushed to the server task


def test_sbatch_options_setup_lines_and_srun_arguments_reach_the_job(
    gradsync_cmd, slurm_env, tmp_path
):
    sweep_dir = tmp_path / "sweep"
    result = run_cli(
        gradsync_cmd, "run", "runner=slurm", "trainer.max_steps=3", "trainer.loader_workers=1",
        'runner.setup=["echo setup-line-ran"]', 'runner.srun_args=["--kill-on-bad-exit=1"]',
        "+runner.additional_parameters.comment=gradsync-test", f"hydra.sweep.dir={sweep_dir}",
        env=slurm_env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert summary(sweep_dir / "0")["status"] == "completed"
    (script,) = (sweep_dir / ".submitit").glob("*/*_submission.sh")
    text = script.read_text()
    # Threads and the loader's worker process, each a core; the free-form option as given.
    assert "#SBATCH --cpus-per-task=2" in text and "#SBATCH --comment=gradsync-test" in text
    assert "srun --unbuffered" in text and "--kill-on-bad-exit=1" in text
    logs = "".join(p.read_text() for p in (sweep_dir / ".submitit").glob("*/*_log.out"))
    assert "setup-line-ran" in logs  # the job script ran the setup line before srun
