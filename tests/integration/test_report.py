"""``gradsync report`` over real runs: a sweep of real gloo jobs and a run that failed."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from matplotlib.image import imread

from tests.helpers.cli import metrics, run_cli, summary
from tests.helpers.report import EXPECTED_PLOTS as PLOTS

COMMON = ["model=mlp", "trainer.epochs=2", "trainer.log_every=5", "trainer.checkpoint=false"]


@pytest.fixture(scope="module")
def runs(gradsync_cmd, module_cli_env, tmp_path_factory) -> dict[str, Path]:
    """A sweep (top-k at 1 and 2 workers) and a dense 2-worker run whose rank 1 fails at step
    30, after its first evaluation."""
    root = tmp_path_factory.mktemp("report-runs")
    sweep = root / "sweep"
    result = run_cli(
        gradsync_cmd,
        "run",
        "-m",
        "compressor=topk",
        "trainer.workers=1,2",
        *COMMON,
        f"hydra.sweep.dir={sweep}",
        env=module_cli_env,
    )
    assert result.returncode == 0, result.stderr
    failed = root / "failed"
    result = run_cli(
        gradsync_cmd,
        "run",
        "compressor=none",
        *COMMON,
        f"hydra.run.dir={failed}",
        env={**module_cli_env, "GRADSYNC_FAULT": "1:30"},
    )
    assert result.returncode == 1, result.stderr
    return {"sweep": sweep, "failed": failed}


def _report(gradsync_cmd, env, *args: str):
    return run_cli(gradsync_cmd, "report", *args, env=env, timeout=120)


def _rows(out: Path) -> dict[str, dict[str, str]]:
    return {row["run_dir"]: row for row in csv.DictReader((out / "report.csv").open())}


def _steady_mean(values: list[float]) -> float:
    return sum(values[1:]) / len(values[1:])


def test_table_values_equal_what_the_runs_logged(runs, gradsync_cmd, module_cli_env, tmp_path):
    out = tmp_path / "report"
    result = _report(
        gradsync_cmd,
        module_cli_env,
        str(runs["sweep"]),
        str(runs["failed"]),
        "--out",
        str(out),
        "--target-accuracy",
        "50",
    )
    assert result.returncode == 0, result.stderr
    rows = _rows(out)
    run_dirs = [runs["sweep"] / "0", runs["sweep"] / "1", runs["failed"]]
    assert sorted(rows) == sorted(str(d) for d in run_dirs)
    for run_dir in run_dirs:
        row, logged = rows[str(run_dir)], metrics(run_dir)
        training = [r for r in logged if "train/loss" in r]
        evals = [r for r in logged if "eval/accuracy" in r]
        assert row["status"] == summary(run_dir)["status"]
        assert float(row["accuracy (%)"]) == pytest.approx(100 * evals[-1]["eval/accuracy"])
        best = max(r["eval/accuracy"] for r in evals)
        assert float(row["best accuracy (%)"]) == pytest.approx(100 * best)
        reached = next((r for r in evals if r["eval/accuracy"] >= 0.5), None)
        assert row["steps to 50%"] == (str(reached["step"]) if reached else "")
        rates = [r["perf/samples_per_s"] for r in training]
        assert float(row["samples/s"]) == pytest.approx(_steady_mean(rates))
        sent = [r["comm/bytes_sent"] for r in training]
        assert float(row["bytes/step"]) == pytest.approx(sum(sent) / len(sent))
        density = [r["comm/density_actual"] for r in training]
        assert float(row["density actual"]) == pytest.approx(sum(density) / len(density))
        assert float(row["error norm"]) == training[-1]["comm/error_norm"]
        iteration = [r["time/iteration"] for r in training]
        assert float(row["iteration (ms)"]) == pytest.approx(1e3 * _steady_mean(iteration))
    failed = rows[str(runs["failed"])]
    assert failed["status"] == "failed" and "rank 1" in failed["error"]
    assert [rows[str(d)]["compressor"] for d in run_dirs] == ["topk", "topk", "none"]
    assert [rows[str(d)]["workers"] for d in run_dirs] == ["1", "2", "2"]
    text = (out / "report.md").read_text()
    assert "| run | compressor | workers | status |" in text
    assert "rank 1 failed" in text  # in the notes
    assert "gradsync: warning:" in result.stderr and "failed" in result.stderr


def test_every_plot_is_drawn_and_embedded(runs, gradsync_cmd, module_cli_env, tmp_path):
    out = tmp_path / "report"
    args = [str(runs["sweep"]), str(runs["failed"]), "--out", str(out)]
    assert _report(gradsync_cmd, module_cli_env, *args).returncode == 0
    text = (out / "report.md").read_text()
    for name in PLOTS:
        image = imread(out / name)
        assert image.shape[0] > 200 and image.shape[1] > 400, name
        assert image.std() > 0.01, f"{name} is blank"
        assert f"]({name})" in text
    # Running it again replaces the report in place; nothing left half-written beside it.
    assert _report(gradsync_cmd, module_cli_env, *args).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([*PLOTS, "report.md", "report.csv"])


def test_partial_corrupt_and_missing_metric_runs_are_reported(
    runs, gradsync_cmd, module_cli_env, tmp_path
):
    mixed = tmp_path / "mixed"
    running, damaged, older = mixed / "running", mixed / "damaged", mixed / "older"
    for copy in (running, damaged, older):
        shutil.copytree(runs["sweep"] / "1", copy)  # top-k, 2 workers
    # Still running: no summary yet, the last line cut short mid-write.
    (running / "summary.json").unlink()
    lines = (running / "metrics.jsonl").read_text().splitlines()
    (running / "metrics.jsonl").write_text("\n".join(lines[:4]) + "\n" + lines[4][:25])
    # A damaged line in the middle.
    lines = (damaged / "metrics.jsonl").read_text().splitlines()
    lines.insert(2, "\x00\x00garbage")
    (damaged / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    # A run that never logged an error norm.
    records = [json.loads(line) for line in (older / "metrics.jsonl").read_text().splitlines()]
    stripped = [{k: v for k, v in r.items() if k != "comm/error_norm"} for r in records]
    (older / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stripped))

    result = _report(gradsync_cmd, module_cli_env, str(mixed))
    assert result.returncode == 0, result.stderr
    out = mixed / "report"
    rows = _rows(out)
    assert rows[str(running)]["status"] == "incomplete"
    assert rows[str(damaged)]["status"] == "completed"
    assert rows[str(older)]["error norm"] == ""
    assert len(rows) == 3  # only the runs under the path given
    # The damaged line is skipped; every other value is as logged.
    assert rows[str(damaged)]["samples/s"] == rows[str(older)]["samples/s"]
    assert "metrics.jsonl: skipped 1 line(s)" in result.stderr and "line 3" in result.stderr
    assert "comm/error_norm not logged by: older" in result.stderr
    text = (out / "report.md").read_text()
    assert "skipped 1 line(s)" in text and "incomplete" in text
    assert (out / "error_norm.png").stat().st_size > 0
    assert "line 5" in result.stderr  # the torn last line of the running copy
