"""``gradsync run`` with image models and datasets: real workers, real loaders, few steps."""

from __future__ import annotations

from tests.helpers.cli import (
    assert_same_params,
    final_params,
    metrics,
    run_cli,
    run_completed,
    summary,
)
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


def test_a_run_resumed_mid_epoch_trains_on_the_uninterrupted_runs_batches(
    gradsync_cmd, cli_env, tmp_path
):
    # 20 training images, 2 workers × 2: five steps an epoch, and the first run stops after
    # three of them. Cropped and flipped at random: the resumed run must draw, for each of the
    # epoch's remaining positions, what the uninterrupted run drew.
    job = ["model=mlp", "dataset=cifar10", *write_cifar10(tmp_path / "data")]
    job += ["trainer.workers=2", "trainer.batch_size=2", "trainer.log_every=1"]
    straight = run_completed(
        gradsync_cmd, cli_env, tmp_path / "straight", *job, "trainer.max_steps=8"
    )
    first = run_completed(gradsync_cmd, cli_env, tmp_path / "first", *job, "trainer.max_steps=3")
    resumed = run_completed(
        gradsync_cmd,
        cli_env,
        tmp_path / "resumed",
        *job,
        "trainer.max_steps=8",
        f"trainer.resume={first}",
    )
    losses = {
        run: {r["step"]: r["train/loss"] for r in metrics(run) if "train/loss" in r}
        for run in (straight, resumed)
    }
    assert sorted(losses[resumed]) == [4, 5, 6, 7, 8]  # it went on from step 3, in epoch 0
    assert losses[resumed] == {step: losses[straight][step] for step in losses[resumed]}
    assert_same_params(final_params(resumed), final_params(straight))
