"""The pieces of ``python -m benchmarks.gpu`` that start processes, on the CPU at a small size:
the limits beside a real ``gradsync run``, a parameter server's real run against the host's
limit, ``pytest -m gpu`` stopped in time and keeping every outcome and traceback (in a JUnit
XML file too), the log that keeps everything printed, and the command's refusal where there is
no GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.gpu_jobs import Sizes
from benchmarks.gpu_limits import DATA_GOAL, SPEED_GOAL, limit_rows, limits_table
from benchmarks.gpu_matrix import DENSE, REFERENCE, MatrixJob, matrix_on_workers
from benchmarks.gpu_pytest import gpu_tests
from benchmarks.gpu_results import RESULTS
from benchmarks.gpu_runs import RunSizes
from benchmarks.gpu_servers import host_limit, server_rows, servers_table
from benchmarks.gpu_tables import goal_cells
from gradsync.schedulers.registry import SCHEDULERS
from tests.helpers.gpu_benchmark import CPU, TINY, one_rank_group, table_rows

REPO = Path(__file__).resolve().parents[2]
RUN = RunSizes(steps=6, log_every=1)


@pytest.fixture
def one_rank(tmp_path: Path) -> Iterator[None]:
    with one_rank_group(tmp_path / "store"):
        yield


def test_the_limits_stand_beside_a_real_run_of_the_same_job(one_rank, tmp_path):
    rows = limit_rows([TINY], ["fp32"], CPU, Sizes(warmup=2, steps=2, rounds=2), RUN, tmp_path)
    (row,) = rows
    assert (row.workload, row.precision, row.run.error) == ("MLP", "fp32", None)
    assert row.bare > 0 and row.ddp > 0
    assert row.run.steady is not None
    assert row.ratio == pytest.approx(row.run.steady.samples_per_s / row.bare)
    assert row.data_share is not None and 0 < row.data_share < 1
    (cells,) = table_rows(limits_table(rows))
    assert cells[5:11] == [
        *goal_cells(SPEED_GOAL, row.ratio),
        *goal_cells(DATA_GOAL, row.data_share),
    ]
    assert (tmp_path / "MLP-fp32" / "metrics.jsonl").is_file()  # a real run's directory


def test_a_parameter_server_run_is_held_against_the_hosts_limit(tmp_path):
    limit = host_limit(TINY, CPU, repeats=2)
    assert limit.gradient_bytes == 4 * sum(  # the MLP of conf/model/mlp.yaml, float32
        a * b + b for a, b in [(16, 128), (128, 64), (64, 10)]
    )
    assert limit.loopback_bytes_per_s > 0 and limit.update_s > 0
    pushed_and_pulled = 2 * limit.gradient_bytes / limit.loopback_bytes_per_s
    assert limit.seconds == pytest.approx(pushed_and_pulled + limit.update_s)
    server = next(n for n, s in SCHEDULERS.items() if s.capabilities.parameter_server)
    job = MatrixJob(server, DENSE)
    (row,) = server_rows([job], TINY, CPU, RUN, tmp_path)
    assert row.run.error is None and row.exchange_s() is not None
    assert row.exchange_s() > 0
    (cells,) = table_rows(servers_table([row], limit))
    assert cells[0] == server
    assert cells[6:] == goal_cells(job.goal, row.exchange_s() / limit.seconds)[1:]


def test_the_gpu_tests_report_their_summary_and_stop_in_time():
    selection = ["tests/gpu/test_skips.py"]  # none marked gpu: deselected, quickly
    done = gpu_tests(120, selection)
    assert done.stopped_after_s is None
    assert done.summary.startswith("4 deselected in ")
    stopped = gpu_tests(0.1, selection)
    assert stopped.stopped_after_s == 0.1
    assert str(stopped).endswith("(stopped after 0 s, the time left)")


def _kept(folder: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*")} if folder.exists() else {}


@pytest.mark.parametrize("options", [[], ["--tests-only", "--minutes", "1", "--results", "KEEP"]])
def test_without_cuda_the_command_refuses_in_one_line_and_writes_nothing(options, tmp_path):
    benchmarks_md = REPO / "BENCHMARKS.md"
    before, kept = benchmarks_md.read_bytes(), _kept(RESULTS)
    argv = [str(tmp_path / "kept") if o == "KEEP" else o for o in options]
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu", *argv],
        cwd=REPO,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},  # no GPU visible, on any machine
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: python -m benchmarks.gpu needs a CUDA GPU and torch finds none; run it on a "
        "machine with one, or the CPU benchmarks here: make bench"
    ]
    assert result.stdout == ""
    assert benchmarks_md.read_bytes() == before
    assert _kept(RESULTS) == kept
    assert not (tmp_path / "kept").exists()


GPU_TESTS = """
import pytest


def inner():
    assert 1 + 1 == 3, "the innermost frame"


def middle():
    note = "a line of the middle frame, which only a long traceback shows"
    inner()


@pytest.mark.gpu
def test_fails():
    middle()


@pytest.mark.gpu
def test_skips():
    pytest.skip("no device for it")


def test_not_marked():
    pass
"""


def test_the_gpu_tests_keep_every_outcome_and_whole_tracebacks_in_a_junit_file(tmp_path, capsys):
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers = gpu: needs CUDA GPUs\n")
    selection = tmp_path / "test_gpu_selection.py"
    selection.write_text(textwrap.dedent(GPU_TESTS))
    done = gpu_tests(120, [str(selection)], junit=tmp_path / "tests.xml")
    assert done.summary.startswith("1 failed, 1 skipped, 1 deselected in ")
    assert done.returncode == 1 and done.stopped_after_s is None
    printed = capsys.readouterr().err
    middle = "a line of the middle frame, which only a long traceback shows"
    assert middle in printed and "the innermost frame" in printed
    summary = printed.split("short test summary info", 1)[1]  # -rA: every outcome
    assert re.search(r"^FAILED \S*test_gpu_selection.py::test_fails\b", summary, re.M)
    assert re.search(
        r"^SKIPPED \[1\] \S*test_gpu_selection.py:\d+: no device for it", summary, re.M
    )
    suite = ET.parse(tmp_path / "tests.xml").getroot().find("testsuite")
    assert suite is not None
    counts = {key: suite.get(key) for key in ("tests", "failures", "skipped", "errors")}
    assert counts == {"tests": "2", "failures": "1", "skipped": "1", "errors": "0"}
    failure = suite.find("testcase[@name='test_fails']/failure")
    assert failure is not None and middle in (failure.text or "")


TEE = """
import os, subprocess, sys
from pathlib import Path
from benchmarks.gpu_results import tee_output
with tee_output(Path(sys.argv[1])):
    print("printed")
    print("on stderr", file=sys.stderr)
    os.write(1, b"written to the descriptor\\n")
    subprocess.run([sys.executable, "-c", "print('a child process')"], check=True)
print("after the log")
"""


def test_the_log_keeps_everything_printed_while_the_console_shows_it(tmp_path):
    log = tmp_path / "gpu.log"
    result = subprocess.run(
        [sys.executable, "-c", TEE, str(log)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    kept = ["printed", "written to the descriptor", "a child process"]
    assert result.stdout.splitlines() == [*kept, "after the log"]
    assert result.stderr.splitlines() == ["on stderr"]
    assert sorted(log.read_text().splitlines()) == sorted([*kept, "on stderr"])


@pytest.mark.slow  # two spawned workers: seconds each to start
def test_the_matrix_runs_with_one_worker_per_device():
    reference = MatrixJob(REFERENCE, DENSE)
    wfbp = MatrixJob("wfbp", DENSE, reference)
    jobs = [reference, wfbp, MatrixJob("wfbp", DENSE, wfbp, ddp=True)]
    rows = matrix_on_workers(jobs, TINY, Sizes(warmup=2, steps=2, rounds=2), 2, "cpu")
    assert [row.job for row in rows] == jobs
    assert all(row.seconds is not None and row.seconds > 0 for row in rows)
