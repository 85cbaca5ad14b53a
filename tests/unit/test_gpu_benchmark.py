"""The pieces of ``python -m benchmarks.gpu`` on the CPU at a small size: the scheduler ×
compressor matrix and the kernel table on a one-rank gloo group, with real schedulers and
compressors. What they measure is not checked (timings belong to BENCHMARKS.md); what they
return is: every option present, ratios of the numbers measured, goal cells that agree with
them."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from benchmarks.gpu_jobs import Sizes
from benchmarks.gpu_kernels import COPY, QUANTIZERS, RANDOM, SELECTORS, kernel_rows, kernels_table
from benchmarks.gpu_matrix import (
    DDP_GOAL,
    DENSE,
    REFERENCE,
    SPARSE,
    MatrixJob,
    for_sparsifiers,
    matrix_jobs,
    matrix_table,
    measure_matrix,
    ratios,
)
from benchmarks.gpu_pytest import summary_line
from benchmarks.gpu_runs import SETTLING_WINDOWS, steady
from benchmarks.gpu_tables import Goal, goal_cells
from benchmarks.measure import gradsync_command
from gradsync.jobs.discovery import group_options
from gradsync.schedulers.registry import SCHEDULERS
from gradsync.types import GroupInfo, TensorPart
from tests.helpers.gpu_benchmark import CPU, TINY, one_rank_group, table_rows

COMPRESSORS = group_options()["compressor"]


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with one_rank_group(tmp_path_factory.mktemp("group") / "store"):
        yield


def test_a_goal_says_met_where_the_ratio_reaches_it():
    at_least, at_most = Goal(0.95), Goal(1.5, at_most=True)
    assert goal_cells(at_least, 0.97) == ["0.97", "≥ 0.95", "met"]
    assert goal_cells(at_least, 0.95)[2] == "met"  # the bound itself meets it
    assert goal_cells(at_least, 0.90)[2] == "not met"
    assert goal_cells(at_most, 1.2)[1:] == ["≤ 1.5", "met"]
    assert goal_cells(at_most, 1.5)[2] == "met"
    assert goal_cells(at_most, 1.6)[2] == "not met"
    assert goal_cells(Goal(0.02, at_most=True, percent=True), 0.03) == ["3.0%", "≤ 2%", "not met"]
    assert goal_cells(None, 0.5) == ["0.50", "—", "—"]
    assert goal_cells(at_least, None) == ["—", "≥ 0.95", "—"]


def test_the_matrix_lists_every_scheduler_and_compressor_with_its_baseline():
    jobs = matrix_jobs(COMPRESSORS)
    assert {job.scheduler for job in jobs} == set(SCHEDULERS)
    assert len(set(jobs)) == len(jobs)
    reference = MatrixJob(REFERENCE, DENSE)
    assert jobs[0] == reference
    with_reference = {job.compressor for job in jobs if job.scheduler == REFERENCE}
    assert with_reference == set(COMPRESSORS)
    for job in jobs:
        assert job.baseline is None or job.baseline in jobs  # measured beside it
        if job.ddp:  # DDP with the scheduler's buckets, its ratio the scheduler's step ÷ DDP's
            scheduler = job.baseline
            assert (scheduler.scheduler, scheduler.compressor, scheduler.ddp) == (
                job.scheduler,
                DENSE,
                False,
            )
            assert jobs.index(scheduler) < jobs.index(job)  # planned before it is copied
            assert job.goal == DDP_GOAL
        elif job.in_process and job.goal is not None:
            assert job.baseline is not None and job.baseline.scheduler == REFERENCE
            assert job.baseline.compressor == job.compressor
    lockstep = {name for name, s in SCHEDULERS.items() if not s.capabilities.parameter_server}
    assert {job.scheduler for job in jobs if job.ddp} == lockstep
    servers = {job.scheduler for job in jobs if not job.in_process}
    parameter_servers = {n for n, s in SCHEDULERS.items() if s.capabilities.parameter_server}
    assert servers == parameter_servers
    sparse = {job.scheduler for job in jobs if job.compressor == SPARSE and job.goal is not None}
    assert sparse == {name for name in SCHEDULERS if for_sparsifiers(name)} - {REFERENCE}
    assert sparse  # LAGS, MGS and OMGS, as the registry describes them


MEASURED = [
    MatrixJob(REFERENCE, DENSE),
    MatrixJob("wfbp", DENSE, MatrixJob(REFERENCE, DENSE), Goal(0.95)),
    MatrixJob(REFERENCE, SPARSE, MatrixJob(REFERENCE, DENSE)),
    MatrixJob("lags", SPARSE, MatrixJob(REFERENCE, SPARSE, MatrixJob(REFERENCE, DENSE)), Goal(0.9)),
    MatrixJob("mgs", "no-such-compressor", MatrixJob(REFERENCE, DENSE), Goal(0.9)),
]


def test_the_matrix_measures_each_job_beside_its_baseline(one_rank):
    rows = measure_matrix(MEASURED, TINY, CPU, Sizes(warmup=2, steps=2, rounds=2))
    assert [row.job for row in rows] == MEASURED
    *measured, refused = rows
    assert all(
        row.seconds is not None and row.seconds > 0 and row.error is None for row in measured
    )
    assert refused.seconds is None and "no-such-compressor" in refused.error
    ratio = ratios(rows)
    assert ratio[MEASURED[0]] is None  # the reference
    for row in measured[1:]:
        assert ratio[row.job] == pytest.approx(ratios_of(rows, row.job))
    assert ratio[refused.job] is None
    table = table_rows(matrix_table(rows, TINY.batch))
    assert [cells[:2] for cells in table] == [[j.scheduler, j.compressor] for j in MEASURED]
    for row, cells in zip(rows, table, strict=True):
        assert cells[6:8] == goal_cells(row.job.goal, ratio[row.job])[1:]


def ratios_of(rows, job: MatrixJob) -> float:
    seconds = {row.job: row.seconds for row in rows}
    return seconds[job.baseline] / seconds[job]


def tiny_gradient() -> tuple[torch.Tensor, GroupInfo]:
    """One backward pass of a small model: its flat gradient and its tensors' shapes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    nn.functional.cross_entropy(model(torch.randn(8, 16)), torch.randint(0, 4, (8,))).backward()
    params = list(model.parameters())
    parts = tuple(TensorPart(i, tuple(p.shape)) for i, p in enumerate(params))
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    return flat, GroupInfo("all", 0, parts=parts, model_tensors=len(parts))


def test_the_kernel_table_times_every_compressor_beside_its_limit(one_rank):
    gradient, group = tiny_gradient()
    rows = kernel_rows("tiny", gradient, group, COMPRESSORS, CPU, repeats=2)
    limits = {row.limit: row.seconds for row in rows if not row.compressor}
    compressors = [row for row in rows if row.compressor]
    assert [row.compressor for row in compressors] == COMPRESSORS
    assert {COPY, RANDOM} <= set(limits)
    assert all(seconds is not None and seconds > 0 for seconds in limits.values())
    for row in compressors:
        assert row.error is None, row
        assert row.limit_s == limits[row.limit]
        assert row.ratio == pytest.approx(row.seconds / limits[row.limit])
        if row.compressor in SELECTORS:
            assert row.limit.startswith("torch.topk") and row.goal is not None
        if row.compressor in QUANTIZERS:
            assert row.limit == RANDOM and row.goal is not None
    assert set(SELECTORS) | set(QUANTIZERS) <= set(COMPRESSORS)
    table = table_rows(kernels_table(rows))
    for row, cells in zip(rows, table, strict=True):
        if row.compressor:
            assert cells[5:] == goal_cells(row.goal, row.ratio)


def test_a_run_is_read_once_it_settled(tmp_path: Path):
    windows = [
        {
            "step": step,
            "train/loss": 1.0,
            "perf/samples_per_s": speed,
            "time/data": data,
            "time/comm": 0.002,
            "time/iteration": 0.01,
        }
        for step, speed, data in [
            (1, 5.0, 0.5),
            (2, 7.0, 0.4),
            (3, 100.0, 0.001),
            (4, 300.0, 0.003),
            (5, 200.0, 0.002),
        ]
    ]
    lines = [*windows[:3], {"step": 3, "eval/loss": 2.0}, *windows[3:]]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(w) + "\n" for w in lines))
    settled = steady(tmp_path)
    assert SETTLING_WINDOWS == 2
    assert settled.samples_per_s == 200.0  # the median of the windows after the first two
    assert settled.seconds == {"data": 0.002, "comm": 0.002, "iteration": 0.01}
    assert settled.share("data") == pytest.approx(0.2)
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(w) + "\n" for w in windows[:2]))
    with pytest.raises(ValueError, match="run more steps"):
        steady(tmp_path)


@pytest.mark.parametrize(
    ("output", "summary"),
    [
        ("x\n==== 3 passed, 1 skipped in 12.30s ====\n", "3 passed, 1 skipped in 12.30s"),
        ("1 failed, 2 passed in 0.51s\n", "1 failed, 2 passed in 0.51s"),
        ("!!! KeyboardInterrupt !!!\nno tests ran in 1.30s\n", "no tests ran in 1.30s"),
        ("a test's run said 1 passed in 0.10s\n=== 2 failed in 5.00s ===\n", "2 failed in 5.00s"),
        ("Traceback ...\n", "no summary line: pytest ended before printing one"),
    ],
)
def test_the_tests_summary_is_pytests_last_line(output, summary):
    assert summary_line(output) == summary


def test_runs_start_the_installed_command_or_else_the_module(monkeypatch, tmp_path: Path):
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    monkeypatch.setattr(sys, "executable", str(python))
    assert gradsync_command() == [str(python), "-m", "gradsync"]  # sources on PYTHONPATH
    (python.parent / "gradsync").write_text("")
    assert gradsync_command() == [str(python.parent / "gradsync")]
