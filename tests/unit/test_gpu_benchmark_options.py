"""``python -m benchmarks.gpu``'s options and what it keeps, on the CPU: the budget, the tests
alone, the results folder, one line for a bad option; the JSON of every table's rows (fed rows
of the tables' own kinds), a results folder cleared of an earlier run's files, and a failed
measurement's traceback printed for the log beside its one-line cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import gpu
from benchmarks.gpu_kernels import COPY, QUANTIZER_GOAL, KernelRow
from benchmarks.gpu_matrix import DENSE, REFERENCE, MatrixJob, MatrixRow
from benchmarks.gpu_pytest import TestsResult as Outcome  # not a test class
from benchmarks.gpu_results import KEPT, RESULTS, TABLES, Table, prepared, tables_json
from benchmarks.gpu_servers import HostLimit
from benchmarks.gpu_tables import reported


def test_the_defaults_are_eight_minutes_of_everything_kept_beside_benchmarks_md():
    args = gpu.parse_arguments([])
    assert (args.minutes, args.tests_only, args.no_write) == (8.0, False, False)
    assert args.results == RESULTS == Path(gpu.__file__).parent / "results" / "gpu"


def test_the_options_choose_the_budget_the_tests_alone_and_the_folder(tmp_path):
    args = gpu.parse_arguments(["--minutes", "2.5", "--tests-only", "--results", str(tmp_path)])
    assert (args.minutes, args.tests_only, args.results) == (2.5, True, tmp_path)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--minutes", "0"], "argument --minutes: minutes must be > 0, got 0.0"),
        (["--minutes", "-3"], "argument --minutes: minutes must be > 0, got -3.0"),
        (["--minutes", "inf"], "argument --minutes: minutes must be a finite number > 0, got inf"),
        (["--minutes", "soon"], "argument --minutes: 'soon' is not a number"),
        (["--tests"], "unrecognized arguments: --tests"),  # no abbreviations
        (["--fast"], "unrecognized arguments: --fast"),
    ],
)
def test_a_bad_option_is_one_line_and_exit_2(argv, says, capsys):
    with pytest.raises(SystemExit) as stop:
        gpu.parse_arguments(argv)
    assert stop.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"error: python -m benchmarks.gpu: {says}; see python -m benchmarks.gpu --help"
    ]


def test_a_results_folder_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "taken").write_text("")
    with pytest.raises(SystemExit) as stop:
        gpu.parse_arguments(["--results", str(tmp_path / "taken")])
    assert stop.value.code == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_the_tests_alone_are_measured_in_the_budget_or_said_not_run(tmp_path):
    # Less than the tests' least time left: nothing starts, so no GPU is needed to see that
    # --tests-only measures nothing else.
    clock = gpu.Clock(gpu.WRITING_S + gpu.LEAST_TESTS_S - 5)
    assert 0 < clock.left() <= clock.budget_s
    (table,) = gpu.measured_tables(gpu.ON_ONE_GPU, clock, tmp_path / "tests.xml", tests_only=True)
    assert (table.key, table.rows) == ("tests", ())
    assert table.text == table.notes["not_run"] and table.text.startswith("Not run: ")
    assert not (tmp_path / "tests.xml").exists()


def test_every_row_of_every_table_is_in_the_json():
    reference = MatrixJob(REFERENCE, DENSE)
    matrix = [
        MatrixRow(reference, 0.01, {}),
        MatrixRow(MatrixJob("wfbp", DENSE, reference), None, {"a.point": 0.5}, "Boom: failed"),
    ]
    kernels = [KernelRow("MLP", "qsgd", 2e-3, COPY, 1e-3, QUANTIZER_GOAL)]
    limit = HostLimit(gradient_bytes=400, loopback_bytes_per_s=1e9, update_s=1e-4)
    tests = Outcome("3 passed in 1.00s", 0, None)
    tables = [
        Table("matrix", "Schedulers", "side by side", "| table |", matrix),
        Table("kernels", "Kernels", "median", "| table |", kernels),
        Table("servers", "Servers", "runs", "| table |", [], {"host_limit": limit}),
        Table("tests", "Tests", "pytest", str(tests), [tests], {"junit": "tests.xml"}),
    ]
    data = json.loads(tables_json({"command": "c", "seconds": 1.5}, tables))
    assert (data["command"], data["seconds"]) == ("c", 1.5)
    assert list(data["tables"]) == ["matrix", "kernels", "servers", "tests"]
    wfbp = data["tables"]["matrix"]["rows"][1]
    assert wfbp["job"]["baseline"] == {
        "scheduler": REFERENCE,
        "compressor": DENSE,
        "baseline": None,
        "goal": None,
        "ddp": False,
    }
    assert (wfbp["seconds"], wfbp["host_syncs"], wfbp["error"]) == (
        None,
        {"a.point": 0.5},
        "Boom: failed",
    )
    (kernel,) = data["tables"]["kernels"]["rows"]
    assert kernel["goal"] == {"bound": 3.0, "at_most": True, "percent": False}
    assert (kernel["seconds"], kernel["limit_s"]) == (2e-3, 1e-3)
    servers = data["tables"]["servers"]
    assert servers["host_limit"]["gradient_bytes"] == 400 and servers["rows"] == []
    assert data["tables"]["tests"] == {
        "title": "Tests",
        "what": "pytest",
        "junit": "tests.xml",
        "rows": [{"summary": "3 passed in 1.00s", "returncode": 0, "stopped_after_s": None}],
    }


def test_the_results_folder_keeps_nothing_of_an_earlier_run_but_what_is_not_its_own(tmp_path):
    folder = tmp_path / "results" / "gpu"
    folder.mkdir(parents=True)
    for name in KEPT:
        (folder / name).write_text("an earlier run's")
    (folder / "notes.md").write_text("mine")
    assert prepared(folder) == folder
    assert sorted(p.name for p in folder.iterdir()) == ["notes.md"]
    assert prepared(tmp_path / "new").is_dir()
    assert TABLES in KEPT


def test_a_failed_measurement_is_one_line_in_its_cell_and_its_traceback_in_the_log(capsys):
    def measure() -> None:
        raise RuntimeError("gradsync run failed:\nthe worker's last line")

    try:
        measure()
    except RuntimeError as exc:
        cell = reported(exc)
    assert cell == "RuntimeError: the worker's last line"
    printed = capsys.readouterr().err
    assert printed.startswith("Traceback (most recent call last):")
    assert "in measure" in printed and "gradsync run failed:" in printed
