"""``gradsync run`` end to end: real worker processes, real gloo, real data."""

from __future__ import annotations

import csv
from importlib import metadata

import pytest
import torch

from gradsync.jobs.discovery import group_options
from gradsync.train.loop import Trainer  # noqa: F401 - the worker package must import cleanly
from tests.helpers.cli import final_params, metrics, run_cli, summary

METRIC_NAMES = {
    "train/loss",
    "lr",
    "comm/density_setup",
    "comm/density_actual",
    "comm/error_norm",
    "comm/bytes_sent",
    "perf/samples_per_s",
    "time/forward",
    "time/backward",
    "time/compress",
    "time/compress_max",
    "time/forward_max",
    "time/compute_max",
    "comm/bytes_wire_max",
    "time/comm",
    "time/update",
    "time/iteration",
}


def test_default_job_trains_to_a_sensible_accuracy(gradsync_cmd, cli_env, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(gradsync_cmd, "run", f"hydra.run.dir={run_dir}", env=cli_env)
    assert result.returncode == 0, result.stderr
    s = summary(run_dir)
    assert s["status"] == "completed" and s["error"] is None
    assert s["final"]["eval/accuracy"] >= 0.95  # digits, small CNN, 10 epochs
    assert s["final"]["comm/density_actual"] == 1.0 and s["final"]["comm/error_norm"] == 0.0
    num_params = sum(t.numel() for t in final_params(run_dir).values())
    assert s["final"]["comm/bytes_sent"] == num_params * 4  # one dense fp32 all-reduce
    assert s["versions"]["torch"] == metadata.version("torch")
    assert s["command"].startswith("gradsync run") and s["config_path"].endswith("config.yaml")
    assert (run_dir / "config.yaml").is_file() and (run_dir / ".hydra" / "config.yaml").is_file()
    train_records = [r for r in metrics(run_dir) if "train/loss" in r]
    assert train_records and all(set(r) >= METRIC_NAMES for r in train_records)
    log_text = (run_dir / "train.log").read_text()
    assert "[rank 0]" in log_text and "accuracy" in log_text
    assert "run dir:" in result.stderr and "accuracy" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("group", ["compressor", "scheduler"])
def test_every_method_trains_with_the_defaults_of_everything_else(
    gradsync_cmd, cli_env, tmp_path, group
):
    """Every compressor, and every scheduler, as a new user types it with nothing else set,
    trains a few steps (``tests/unit/test_configs.py`` composes each in the default run)."""
    options = group_options()[group]
    sweep = tmp_path / "sweep"
    result = run_cli(
        gradsync_cmd, "run", "-m", f"{group}={','.join(options)}", "trainer.max_steps=3",
        "trainer.log_every=1", "trainer.checkpoint=false", f"hydra.sweep.dir={sweep}",
        env=cli_env, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = list(csv.DictReader((sweep / "summary.csv").open()))
    assert len(rows) == len(options)
    assert all(r["status"] == "completed" for r in rows), rows


def test_sweep_runs_every_job_and_writes_summary_csv(gradsync_cmd, cli_env, tmp_path):
    sweep = tmp_path / "sweep"
    result = run_cli(
        gradsync_cmd,
        "run",
        "-m",
        "trainer.workers=1,2",
        "trainer.lr=0.1,0.05",
        "trainer.max_steps=8",
        "trainer.checkpoint=false",
        "model=mlp",
        f"hydra.sweep.dir={sweep}",
        env=cli_env,
    )
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader((sweep / "summary.csv").open()))
    assert [r["job"] for r in rows] == ["0", "1", "2", "3"]
    assert {" ".join(r["overrides"].split()[:2]) for r in rows} == {
        f"trainer.workers={w} trainer.lr={lr}" for w in (1, 2) for lr in (0.1, 0.05)
    }
    assert all("trainer.max_steps=8" in r["overrides"] for r in rows)
    assert all(r["status"] == "completed" for r in rows)
    for r in rows:
        job = sweep / r["job"]
        assert float(r["train/loss"]) == pytest.approx(metrics(job)[-1]["train/loss"])


def test_workers_times_batch_equals_one_worker_with_the_whole_batch(
    gradsync_cmd, cli_env, tmp_path
):
    common = ["model=mlp", "trainer.max_steps=15", "trainer.log_every=5"]
    two, one = tmp_path / "two", tmp_path / "one"
    a = run_cli(
        gradsync_cmd,
        "run",
        *common,
        "trainer.workers=2",
        "trainer.batch_size=16",
        f"hydra.run.dir={two}",
        env=cli_env,
    )
    b = run_cli(
        gradsync_cmd,
        "run",
        *common,
        "trainer.workers=1",
        "trainer.batch_size=32",
        f"hydra.run.dir={one}",
        env=cli_env,
    )
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    p2, p1 = final_params(two), final_params(one)
    assert any(not torch.equal(p1[k], p2[k] * 0) for k in p1)
    for key in p1:
        torch.testing.assert_close(p2[key], p1[key], rtol=1e-4, atol=1e-5)


def test_resume_continues_exactly_with_error_feedback_state(gradsync_cmd, cli_env, tmp_path):
    common = ["compressor=randomk", "compressor.density=0.1", "model=mlp", "trainer.workers=2"]
    straight, first, resumed = tmp_path / "straight", tmp_path / "first", tmp_path / "resumed"
    runs = [
        run_cli(
            gradsync_cmd,
            "run",
            *common,
            "trainer.epochs=2",
            f"hydra.run.dir={straight}",
            env=cli_env,
        ),
        run_cli(
            gradsync_cmd, "run", *common, "trainer.epochs=1", f"hydra.run.dir={first}", env=cli_env
        ),
        run_cli(
            gradsync_cmd,
            "run",
            *common,
            "trainer.epochs=2",
            f"trainer.resume={first}",
            f"hydra.run.dir={resumed}",
            env=cli_env,
        ),
    ]
    assert all(r.returncode == 0 for r in runs), "\n".join(r.stderr for r in runs)
    assert summary(straight)["final"]["comm/error_norm"] > 0  # the residual state matters
    expected, got = final_params(straight), final_params(resumed)
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=0, atol=1e-6)
    assert metrics(resumed)[0]["step"] > 22  # it did not start again from step 0


def test_wandb_logger_uses_the_real_client_offline(gradsync_cmd, cli_env, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        gradsync_cmd,
        "run",
        "logger=wandb",
        "trainer.max_steps=5",
        "trainer.checkpoint=false",
        f"hydra.run.dir={run_dir}",
        env=cli_env,
    )
    assert result.returncode == 0, result.stderr
    runs = list(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(runs) == 1 and runs[0].stat().st_size > 0
    assert metrics(run_dir)  # the local record is complete without wandb
