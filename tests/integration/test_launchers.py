"""The worker entry point runs unchanged under torchrun; help lists groups and options."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gradsync.jobs.compose import compose_jobs, write_resolved
from tests.helpers.cli import metrics, run_cli, summary


def test_worker_runs_under_torchrun(cli_env, tmp_path):
    (cfg,) = compose_jobs(
        ["model=mlp", "trainer.max_steps=6", "trainer.log_every=2", "trainer.checkpoint=false"],
        multirun=False,
    )
    config = tmp_path / "config.yaml"
    write_resolved(cfg, config)
    torchrun = Path(sys.executable).parent / "torchrun"
    result = subprocess.run(
        [
            str(torchrun),
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "gradsync.train.worker",
            "--config",
            str(config),
            "--run-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env={**cli_env, "OMP_NUM_THREADS": "1"},
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = metrics(tmp_path)
    assert [r["step"] for r in records if "train/loss" in r] == [2, 4, 6]
    assert records[-1]["eval/accuracy"] > 0.1


def _torchrun_job(cli_env, run_dir, **env):
    torchrun = Path(sys.executable).parent / "torchrun"
    return subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node", "2", "-m", "gradsync", "run",
         "runner=torchrun", "trainer.workers=2", "trainer.max_steps=8",
         f"hydra.run.dir={run_dir}"],
        capture_output=True, text=True, env={**cli_env, **env}, timeout=240,
    )  # fmt: skip


def test_runner_torchrun_runs_a_job_torchrun_started(cli_env, tmp_path):
    result = _torchrun_job(cli_env, tmp_path / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    final = summary(tmp_path / "run")
    assert final["status"] == "completed" and final["final"]["step"] == 8
    assert final["final"]["comm/bytes_wire"] > 0  # two workers really exchanged gradients


def test_runner_torchrun_names_the_rank_that_failed(cli_env, tmp_path):
    result = _torchrun_job(cli_env, tmp_path / "run", GRADSYNC_FAULT="1:3")
    assert result.returncode != 0
    final = summary(tmp_path / "run")
    assert final["status"] == "failed"
    assert final["error"].startswith("rank 1 failed: InjectedFault")


def test_runner_torchrun_outside_torchrun_says_how_to_start_it(gradsync_cmd, cli_env):
    result = run_cli(gradsync_cmd, "run", "runner=torchrun", env=cli_env)
    assert result.returncode == 2
    assert "torchrun --nproc-per-node N -m gradsync run runner=torchrun" in result.stderr


def test_help_lists_groups_and_options(gradsync_cmd, cli_env):
    top = run_cli(gradsync_cmd, "--help", env=cli_env)
    run = run_cli(gradsync_cmd, "run", "--help", env=cli_env)
    for result in (top, run):
        assert result.returncode == 0
        lines = _group_lines(result.stdout)
        assert "none*" in lines["compressor"] and "randomk" in lines["compressor"]
        assert "cnn*" in lines["model"] and "resnet18" in lines["model"]
        assert "digits*" in lines["dataset"] and "local*" in lines["runner"]
    composed = run_cli(gradsync_cmd, "run", "--cfg", "job", "trainer.workers=3", env=cli_env)
    assert composed.returncode == 0 and "workers: 3" in composed.stdout


def _group_lines(text: str) -> dict[str, str]:
    """Each config group's line of the help, its wrapped options joined back on."""
    lines: dict[str, str] = {}
    group = None
    for line in text.splitlines():
        if group is not None and line.startswith(" " * 14):
            lines[group] += " " + line.strip()
        elif line.startswith("  ") and not line.startswith("   "):
            group = line.split()[0]
            lines[group] = line
        else:
            group = None
    return lines


def test_unknown_command(gradsync_cmd, cli_env):
    result = run_cli(gradsync_cmd, "trian", env=cli_env)
    assert result.returncode == 2
    assert "unknown command 'trian'; valid commands: run" in result.stderr
