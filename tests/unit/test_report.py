"""``gradsync report`` pieces on logs written through the real JsonlLogger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from gradsync.cli.report import main as report_main
from gradsync.metrics.loggers import JsonlLogger
from gradsync.metrics.summary import read_metrics_file, steady_mean
from gradsync.report.naming import differing_keys, name_runs, short_names
from gradsync.report.runs import INCOMPLETE, NOT_STARTED, Run, continuous, find_runs
from gradsync.report.table import EVAL_METRICS, build_table, time_parts, time_to_target
from tests.helpers.report import EXPECTED_PLOTS

ACCURACY = EVAL_METRICS[0]


def _write_run(
    run_dir: Path,
    records: list[dict],
    *,
    overrides: list[str] = (),
    config: dict | None = None,
    status: str | None = "completed",
) -> Path:
    """A run directory as gradsync writes one: metrics through the real logger, Hydra's
    overrides and config, and summary.json unless the run is still going."""
    (run_dir / ".hydra").mkdir(parents=True)
    logger = JsonlLogger(run_dir / "metrics.jsonl")
    for record in records:
        logger.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])
    logger.close()
    OmegaConf.save(OmegaConf.create(list(overrides)), run_dir / ".hydra" / "overrides.yaml")
    OmegaConf.save(OmegaConf.create(config or {}), run_dir / ".hydra" / "config.yaml")
    if status is not None:
        summary = {"status": status, "error": None, "overrides": list(overrides), "final": {}}
        (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def _training(step: int, elapsed: float, **values: float) -> dict:
    return {"step": step, "time/elapsed": elapsed, **values}


def test_metrics_file_skips_bad_lines_and_keeps_the_rest(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\nnot json\n[1, 2]\n\n{"step": 2}\n{"step": 3, "lo')
    records, bad = read_metrics_file(path)
    assert records == [{"step": 1}, {"step": 2}]
    assert bad == [2, 3, 6]  # a list is JSON but not a record; blank lines are not errors


def test_steady_mean_leaves_out_the_first_window():
    assert steady_mean([100.0, 2.0, 4.0]) == 3.0
    assert steady_mean([5.0]) == 5.0
    assert steady_mean([]) is None


def test_a_resumed_history_replaces_the_lost_steps_and_keeps_the_clock_running():
    first = [_training(10, 1.0), _training(20, 2.0), {"step": 22, "time/elapsed": 2.2}]
    first += [_training(30, 3.0)]  # logged after the checkpoint at 22, then the job died
    resumed = [_training(30, 0.9), _training(40, 1.9)]  # the new process restarts its clock
    history = continuous(first + resumed)
    assert [r["step"] for r in history] == [10, 20, 22, 30, 40]
    assert [r["time/elapsed"] for r in history] == pytest.approx([1.0, 2.0, 2.2, 3.1, 4.1])
    assert continuous(first) == first  # one attempt: unchanged


def test_a_resumed_history_is_found_even_when_its_clock_reads_later_than_the_first():
    first = [_training(10, 1.0), {"step": 22, "time/elapsed": 2.2}, _training(30, 3.0)]
    resumed = [_training(30, 3.5), _training(40, 4.5)]  # a slow start: the clock reads later
    history = continuous(first + resumed)
    assert [r["step"] for r in history] == [10, 22, 30, 40]
    assert [r["time/elapsed"] for r in history] == pytest.approx([1.0, 2.2, 5.7, 6.7])


def test_time_to_target_is_the_first_evaluation_that_reaches_it(tmp_path):
    records = [
        {"step": 10, "eval/accuracy": 0.5, "time/elapsed": 1.0},
        {"step": 20, "eval/accuracy": 0.91, "time/elapsed": 2.5},
        {"step": 30, "eval/accuracy": 0.89, "time/elapsed": 3.5},
        {"step": 40, "eval/accuracy": 0.95, "time/elapsed": 4.5},
    ]
    run = Run(path=tmp_path, status="completed", records=records)
    assert time_to_target(run, ACCURACY, 0.9) == (2.5, 20)
    assert time_to_target(run, ACCURACY, 0.95) == (4.5, 40)
    assert time_to_target(run, ACCURACY, 0.99) is None
    perplexity = next(m for m in EVAL_METRICS if m.key == "eval/perplexity")
    lm = Run(path=tmp_path, status="completed", records=[{"step": 5, "eval/perplexity": 80.0}])
    assert time_to_target(lm, perplexity, 100.0)[1] == 5  # lower is better


def test_time_parts_sum_to_the_iteration(tmp_path):
    windows = [
        {"time/forward": 9.0, "time/backward": 9.0, "time/iteration": 30.0},  # warm-up window
        {"time/forward": 1.0, "time/backward": 2.0, "time/comm": 3.0, "time/iteration": 7.0},
        {"time/forward": 1.0, "time/backward": 2.0, "time/comm": 5.0, "time/iteration": 9.0},
    ]
    run = Run(path=tmp_path, status="completed", records=windows)
    parts = time_parts(run)
    # "comm" is missing from the first window, so its steady mean is over the one after it.
    assert parts["forward"] == 1.0 and parts["backward"] == 2.0 and parts["comm"] == 5.0
    assert parts["other"] == 0.0  # never negative
    assert "compress" not in parts


def test_names_come_from_the_settings_that_differ(tmp_path):
    runs = [
        Run(
            path=tmp_path / str(i),
            status="completed",
            overrides=[f"compressor={c}", f"trainer.workers={w}", "trainer.epochs=3"],
            choices={"compressor": c},
            config=OmegaConf.create({"trainer": {"workers": w, "epochs": 3}}),
        )
        for i, (c, w) in enumerate([("topk", 2), ("topk", 4), ("none", 2)])
    ]
    assert differing_keys(runs) == ["compressor", "trainer.workers"]
    naming = name_runs(runs)
    assert naming.labels == ["topk, workers=2", "topk, workers=4", "none, workers=2"]
    assert not naming.grouped
    grouped = name_runs(runs, group_by=["compressor"])
    assert grouped.groups() == {"topk": [0, 1], "none": [2]}
    templated = name_runs(runs, template="{compressor}@{trainer.workers}")
    assert templated.labels == ["topk@2", "topk@4", "none@2"]
    assert short_names(["trainer.lr", "optimizer.lr", "compressor.density"]) == {
        "trainer.lr": "trainer.lr",
        "optimizer.lr": "optimizer.lr",
        "compressor.density": "density",
    }


def test_identical_runs_are_told_apart_by_their_directories(tmp_path):
    runs = [
        Run(path=tmp_path / "sweep" / "0", status="completed", overrides=["model=mlp"]),
        Run(path=tmp_path / "again", status="completed", overrides=["model=mlp"]),
    ]
    assert name_runs(runs).labels == ["sweep/0", "again"]


def test_table_columns_follow_what_runs_logged(tmp_path):
    records = [
        _training(10, 1.0, **{"perf/samples_per_s": 50.0, "comm/bytes_sent": 100.0}),
        _training(20, 2.0, **{"perf/samples_per_s": 70.0, "comm/bytes_sent": 300.0}),
        {"step": 20, "time/elapsed": 2.1, "eval/accuracy": 0.8},
    ]
    runs = [Run(path=tmp_path, status="completed", records=records)]
    table = build_table(runs, name_runs(runs), {"eval/accuracy": 0.75})
    names = [c.name for c in table.columns]
    assert "accuracy (%)" in names and "perplexity" not in names
    values = {c.name: c.of(runs[0]) for c in table.columns}
    assert values["samples/s"] == 70.0  # after the first window
    assert values["bytes/step"] == 200.0
    assert values["time to 75% (s)"] == 2.1 and values["steps to 75%"] == 20
    assert values["error norm"] is None  # not logged: blank, not zero


def test_sweep_jobs_not_started_and_runs_without_summary_are_listed(tmp_path):
    sweep = tmp_path / "sweep"
    _write_run(sweep / "0", [_training(10, 1.0)], overrides=["trainer.lr=0.1"])
    _write_run(sweep / "1", [_training(10, 1.0)], overrides=["trainer.lr=0.2"], status=None)
    (sweep / "jobs.txt").write_text("trainer.lr=0.1\ntrainer.lr=0.2\ntrainer.lr=0.3\n")
    runs = find_runs([sweep])
    assert [(r.path.name, r.status) for r in runs] == [
        ("0", "completed"),
        ("1", INCOMPLETE),
        ("2", NOT_STARTED),
    ]
    assert runs[2].setting("trainer.lr") == "0.3"  # named from jobs.txt
    assert [r.path.name for r in find_runs([sweep / "0"])] == ["0"]  # just the one asked for


def test_report_from_generated_runs_writes_tables_and_plots(tmp_path, capsys):
    for i, density in enumerate((0.01, 0.1)):
        records = []
        for step in range(10, 60, 10):
            records.append(
                _training(
                    step,
                    step / 10,
                    **{
                        "comm/density_actual": density * 1.5,
                        "comm/density_setup": density,
                        "comm/error_norm": step * density,
                        "perf/samples_per_s": 100.0 * (i + 1),
                        "time/forward": 0.01,
                        "time/iteration": 0.03,
                    },
                )
            )
        records.append({"step": 50, "time/elapsed": 5.1, "eval/perplexity": 120.0 - 50 * i})
        _write_run(
            tmp_path / "sweep" / str(i),
            records,
            overrides=[f"compressor.density={density}"],
            config={"compressor": {"density": density}},
        )
    assert report_main([str(tmp_path / "sweep"), "--target-perplexity", "100"]) == 0
    out = tmp_path / "sweep" / "report"
    drawn = {p.name for p in out.glob("*.png")}
    # Every plot but scaling: the worker count does not vary.
    assert drawn == set(EXPECTED_PLOTS) - {"scaling.png"}
    assert all((out / name).read_bytes().startswith(b"\x89PNG") for name in drawn)
    text = (out / "report.md").read_text()
    assert "scaling" in text.lower() and "not drawn" in text
    assert "| density=0.1 | 0.1 | completed | 70.00 | 70.00 | 5.1 | 50 |" in text
    assert "report.md" in capsys.readouterr().out


def test_bad_input_gives_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    cases = [
        ([str(tmp_path / "empty")], "no runs under"),
        ([str(tmp_path / "missing")], "is not a directory"),
        ([str(tmp_path), "--target-accuracy", "150"], "is not an accuracy"),
        ([str(tmp_path), "--bogus"], "unrecognized arguments: --bogus"),
        ([str(tmp_path), "--group-by", "a", "--label", "{a}"], "not both"),
    ]
    for args, message in cases:
        assert report_main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith("gradsync: error: ") and message in err, err
        assert err.count("\n") == 1
