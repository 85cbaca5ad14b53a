"""The DEFT paper's claim, from the logs of ordinary CLI runs: with 4 workers at density 0.01,
DEFT and CLT-k keep the actual density at the setup density every step while Top-k (union)
builds it up, and all of them train digits about as well as dense SGD."""

from __future__ import annotations

import csv

import pytest

from tests.helpers.cli import metrics, run_cli, summary

DENSITY = 0.01


@pytest.fixture(scope="module")
def sweep(gradsync_cmd, module_cli_env, tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("sweep")
    result = run_cli(
        gradsync_cmd,
        "run",
        "-m",
        "compressor=none,topk,cltk,deft",  # the sparsifiers' default density is 0.01
        "trainer.workers=4",
        "trainer.epochs=20",
        f"hydra.sweep.dir={sweep_dir}",
        env=module_cli_env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return {name: sweep_dir / str(num) for num, name in enumerate(["none", "topk", "cltk", "deft"])}


def _densities(run_dir):
    return [m["comm/density_actual"] for m in metrics(run_dir) if "comm/density_actual" in m]


@pytest.mark.parametrize("name", ["cltk", "deft"])
def test_density_stays_at_the_setup_density_in_every_logged_window(sweep, name):
    # One record per 10 steps. A single DEFT step can miss by more (each worker sizes its own
    # layers' k from its own gradient norms, so the k's of different owners need not add up
    # to k exactly); what holds is that it does not build up.
    densities = _densities(sweep[name])
    assert len(densities) == 22
    assert all(abs(d / DENSITY - 1) < 0.08 for d in densities), (min(densities), max(densities))


def test_topk_union_builds_up_density(sweep):
    densities = _densities(sweep["topk"])
    assert min(densities) >= DENSITY
    assert sum(densities) / len(densities) > 1.5 * DENSITY  # up to 4x with 4 workers


@pytest.mark.parametrize("name", ["topk", "cltk", "deft"])
def test_sparsified_training_reaches_about_dense_accuracy(sweep, name):
    dense = summary(sweep["none"])["final"]["eval/accuracy"]
    sparse = summary(sweep[name])["final"]
    assert sparse["eval/accuracy"] >= dense - 0.03
    assert sparse["comm/density_setup"] == pytest.approx(DENSITY)
    assert sparse["comm/error_norm"] > 0  # the residual holds what was not sent
    assert sparse["time/compress_max"] >= sparse["time/compress"]
    compute = sparse["time/forward"] + sparse["time/backward"]
    assert sparse["time/compute_max"] >= compute * (1 - 1e-9)  # the slowest worker's
    assert sparse["time/forward"] * (1 - 1e-9) <= sparse["time/forward_max"]
    assert sparse["time/forward_max"] <= sparse["time/compute_max"] * (1 + 1e-9)


def test_deft_with_fewer_layers_than_workers(gradsync_cmd, cli_env, tmp_path):
    # A linear model has two tensors; with four workers DEFT splits the weight into four
    # layers and packs five layers into four bins.
    run_dir = tmp_path / "run"
    result = run_cli(
        gradsync_cmd,
        "run",
        "model=mlp",
        "model.hidden=[]",
        "compressor=deft",
        "trainer.workers=4",
        "trainer.max_steps=5",
        f"hydra.run.dir={run_dir}",
        env=cli_env,
    )
    assert result.returncode == 0, result.stderr
    assert summary(run_dir)["final"]["comm/density_actual"] <= DENSITY + 5 / 650


def test_invalid_exchange_is_one_line_naming_the_valid_choices(gradsync_cmd, cli_env):
    result = run_cli(
        gradsync_cmd, "run", "compressor=topk", "compressor.exchange=allreduce", env=cli_env
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "valid: union, allgather" in lines[0], result.stderr


def test_sweep_over_compressors_with_a_shared_setting(gradsync_cmd, cli_env, tmp_path):
    # compressor.density applies to each job's compressor, though the default (none) has none.
    result = run_cli(
        gradsync_cmd,
        "run",
        "-m",
        "compressor=topk,cltk",
        "compressor.density=0.05",
        "trainer.max_steps=1",
        f"hydra.sweep.dir={tmp_path}",
        env=cli_env,
    )
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert [float(r["comm/density_setup"]) for r in rows] == [0.05, 0.05]
