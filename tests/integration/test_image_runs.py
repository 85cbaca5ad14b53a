"""``gradsync run`` with image models and datasets: real workers, real loaders, few steps."""

from __future__ import annotations

from tests.helpers.cli import run_cli, summary
from tests.helpers.datagen.images import write_cifar10

SHORT = ["trainer.workers=2", "trainer.batch_size=8", "trainer.checkpoint=false"]


def test_resnet18_trains_on_generated_cifar10_files(gradsync_cmd, cli_env, tmp_path):
    data, run_dir = tmp_path / "data", tmp_path / "run"
    result = run_cli(
        gradsync_cmd,
        "run",
        "model=resnet18",
        "dataset=cifar10",
        *write_cifar10(data),  # dataset.root=... dataset.verify=false
        *SHORT,
        "trainer.max_steps=3",
        f"hydra.run.dir={run_dir}",
        env=cli_env,
    )
    assert result.returncode == 0, result.stderr
    s = summary(run_dir)
    assert s["status"] == "completed" and s["error"] is None
    assert 0 <= s["final"]["eval/accuracy"] <= 1


def test_resnet18_synthetic_benchmark_reports_throughput(gradsync_cmd, cli_env, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        gradsync_cmd,
        "run",
        "model=resnet18",
        "dataset=synthetic",
        "dataset.num_test_samples=16",  # the final evaluation is not what is measured
        *SHORT,
        "trainer.max_steps=20",
        f"hydra.run.dir={run_dir}",
        env=cli_env,
    )
    assert result.returncode == 0, result.stderr
    s = summary(run_dir)
    assert s["status"] == "completed"
    assert s["final"]["perf/samples_per_s"] > 0


def test_download_lets_one_process_per_host_prepare_the_data(gradsync_cmd, cli_env, tmp_path):
    # With download=true, local rank 0 loads (and would fetch) first while the others wait at a
    # barrier. Unchecked files that are present need no network, so this runs offline.
    data, run_dir = tmp_path / "data", tmp_path / "run"
    result = run_cli(
        gradsync_cmd,
        "run",
        "model=resnet20",
        "dataset=cifar10",
        *write_cifar10(data),
        "dataset.download=true",
        *SHORT,
        "trainer.max_steps=2",
        f"hydra.run.dir={run_dir}",
        env=cli_env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert summary(run_dir)["status"] == "completed"
