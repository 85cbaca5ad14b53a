from __future__ import annotations

import csv
import json
import math

import pytest
from omegaconf import OmegaConf

from gradsync.metrics.loggers import JsonlLogger, WandbLogger
from gradsync.metrics.summary import final_metrics, read_metrics
from gradsync.metrics.sweep_summary import write_sweep_summary
from gradsync.metrics.window import MetricsWindow
from gradsync.train.build import lr_factor


def test_window_means_and_reset():
    w = MetricsWindow()
    w.add({"a": 1.0, "b": 4.0})
    w.add({"a": 3.0, "b": 0.0})
    assert w.means() == {"a": 2.0, "b": 2.0}
    assert w.steps == 0 and w.means() == {}


def test_jsonl_is_readable_after_every_log_and_survives_a_torn_line(tmp_path):
    logger = JsonlLogger(tmp_path / "metrics.jsonl")
    logger.log({"train/loss": 1.5, "eval/accuracy": math.nan}, step=10)
    assert read_metrics(tmp_path) == [{"step": 10, "train/loss": 1.5, "eval/accuracy": None}]
    logger.close()
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 20, "train/lo')  # a writer killed mid-line
    assert len(read_metrics(tmp_path)) == 1


def test_wandb_mode_in_the_environment_wins_over_logger_wandb_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    logger = WandbLogger(
        run_dir=tmp_path, project="gradsync", entity=None, group=None, tags=(), mode="offline",
        name="run", config={},
    )  # fmt: skip
    logger.log({"train/loss": 1.0}, step=1)
    logger.close()
    assert not list(tmp_path.glob("wandb/offline-run-*"))  # logger.wandb.mode=offline writes one


def test_final_metrics_take_last_values_best_accuracy_and_steady_throughput():
    records = [
        {"step": 10, "train/loss": 2.0, "perf/samples_per_s": 10.0},
        {"step": 20, "eval/accuracy": 0.9},
        {"step": 20, "train/loss": 1.0, "perf/samples_per_s": 100.0},
        {"step": 30, "eval/accuracy": 0.8, "perf/samples_per_s": 300.0},
    ]
    final = final_metrics(records)
    assert final["train/loss"] == 1.0
    assert final["eval/accuracy"] == 0.8 and final["eval/best_accuracy"] == 0.9
    assert final["perf/samples_per_s_mean"] == pytest.approx(200.0)


def test_sweep_summary_has_one_row_per_job(tmp_path):
    for job, status in (("0", "completed"), ("1", "failed"), ("10", "completed")):
        d = tmp_path / job
        (d / ".hydra").mkdir(parents=True)
        (d / ".hydra" / "overrides.yaml").write_text(f"- trainer.seed={job}\n")
        (d / "summary.json").write_text(
            json.dumps(
                {
                    "status": status,
                    "overrides": [f"trainer.seed={job}"],
                    "final": {"eval/accuracy": 0.5},
                    "error": None,
                }
            )
        )
    (tmp_path / "2" / ".hydra").mkdir(parents=True)  # a job that never wrote a summary
    (tmp_path / "2" / ".hydra" / "overrides.yaml").write_text("[]\n")
    rows = list(csv.DictReader(write_sweep_summary(tmp_path).open()))
    assert [r["job"] for r in rows] == ["0", "1", "2", "10"]
    assert [r["status"] for r in rows] == ["completed", "failed", "missing", "completed"]
    assert rows[0]["overrides"] == "trainer.seed=0" and rows[0]["eval/accuracy"] == "0.5"


@pytest.mark.parametrize(
    ("schedule", "extra", "expected"),
    [
        ("constant", {}, [1, 1, 1, 1]),
        ("step", {"lr_step_epochs": 2, "lr_gamma": 0.5}, [1, 1, 0.5, 0.5]),
        ("multistep", {"lr_milestones": [1, 3], "lr_gamma": 0.1}, [1, 0.1, 0.1, 0.01]),
        ("poly", {"lr_power": 2.0}, [1, 0.5625, 0.25, 0.0625]),
        (
            "cosine",
            {},
            [1, 0.5 * (1 + math.cos(math.pi / 4)), 0.5, 0.5 * (1 + math.cos(3 * math.pi / 4))],
        ),
    ],
)
def test_lr_schedules_by_epoch(schedule, extra, expected):
    cfg = OmegaConf.create(
        {
            "trainer": {
                "lr_schedule": schedule,
                "lr_step_epochs": 30,
                "lr_milestones": [],
                "lr_gamma": 0.1,
                "lr_power": 0.5,
                **extra,
            }
        }
    )
    factor = lr_factor(cfg, steps_per_epoch=10, total_steps=40)
    assert [factor(s) for s in (0, 10, 20, 30)] == pytest.approx(expected)
