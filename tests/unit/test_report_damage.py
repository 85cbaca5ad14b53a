"""``gradsync report`` and ``gradsync sweep --summarize`` on damaged run files: each damaged
file is one warning line naming it, the healthy part is reported, and nothing is a traceback.

The runs are written by gradsync's own writers (``JsonlLogger``, ``write_summary``, Hydra's
YAML through OmegaConf), then damaged as a disk, an editor or a killed process would."""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from gradsync.cli.report import main as report_main
from gradsync.cli.sweep import main as sweep_main
from gradsync.metrics.loggers import JsonlLogger
from gradsync.metrics.summary import write_summary
from gradsync.report.document import data_warnings
from gradsync.report.naming import name_runs, show
from gradsync.report.runs import NOT_STARTED, ReportError, Run, collect_runs
from gradsync.report.table import build_table, to_csv, to_markdown

DENSITIES = (0.01, 0.1, 0.5)


def _write_run(run_dir: Path, density: float) -> Path:
    """One finished top-k run: training windows and evaluations through the real logger, the
    Hydra files a run directory holds, and its summary.json through ``write_summary``."""
    (run_dir / ".hydra").mkdir(parents=True)
    logger = JsonlLogger(run_dir / "metrics.jsonl")
    for step in range(10, 60, 10):
        logger.log(
            {
                "train/loss": 2.0 / step,
                "comm/density_actual": density * 1.2,
                "comm/error_norm": step * density,
                "perf/samples_per_s": 100.0 + step,
                "time/forward": 0.01,
                "time/iteration": 0.03,
                "time/elapsed": step / 10,
            },
            step=step,
        )
        logger.log({"eval/accuracy": 0.5 + step / 200, "time/elapsed": step / 10 + 0.05}, step=step)
    logger.close()
    overrides = ["compressor=topk", f"compressor.density={density}"]
    OmegaConf.save(OmegaConf.create(overrides), run_dir / ".hydra" / "overrides.yaml")
    config = {"compressor": {"name": "topk", "density": density}, "trainer": {"workers": 2}}
    OmegaConf.save(OmegaConf.create(config), run_dir / ".hydra" / "config.yaml")
    hydra = {"hydra": {"runtime": {"choices": {"compressor": "topk", "model": "mlp"}}}}
    OmegaConf.save(OmegaConf.create(hydra), run_dir / ".hydra" / "hydra.yaml")
    now = time.time()
    write_summary(
        run_dir,
        status="completed",
        command="gradsync run",
        overrides=overrides,
        config_path=run_dir / ".hydra" / "config.yaml",
        started=now - 5,
        ended=now,
    )
    return run_dir


def _write_sweep(sweep: Path) -> Path:
    for job, density in enumerate(DENSITIES):
        _write_run(sweep / str(job), density)
    (sweep / "jobs.txt").write_text("".join(f"compressor.density={d}\n" for d in DENSITIES))
    return sweep


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """The sweep every test copies before damaging its copy."""
    return _write_sweep(tmp_path_factory.mktemp("written") / "sweep")


@pytest.fixture
def sweep(written, tmp_path) -> Path:
    return Path(shutil.copytree(written, tmp_path / "sweep"))


def _report(capsys, *args: str) -> tuple[int, list[str]]:
    """``gradsync report`` in this process: its exit code and its stderr lines."""
    code = report_main(list(args))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [line for line in err.splitlines() if line.strip()]


def _rows(out: Path) -> dict[str, dict[str, str]]:
    with (out / "report.csv").open(encoding="utf-8") as handle:
        return {Path(row["run_dir"]).name: row for row in csv.DictReader(handle)}


# ---- metrics.jsonl ------------------------------------------------------------------------------
def _cut_in_line(number: int):
    def change(text: bytes) -> bytes:
        ends = [at for at, byte in enumerate(text) if byte == ord("\n")]
        return text[: ends[number - 1] - 7]

    return change


METRICS_DAMAGE = {  # how, the lines skipped, the last accuracy left
    "binary tail": (lambda text: text + b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x80data", [11, 12, 13], 75),
    "invalid UTF-8": (lambda text: text.replace(b'"train/loss"', b'"train/\xc3(', 1), [1], 75),
    "NUL bytes": (lambda text: text.replace(b"\n", b"\n\x00\x00\x00\n", 1), [2], 75),
    "cut mid-record": (_cut_in_line(3), [3], 55),
    "a number no float holds": (
        lambda text: text.replace(b'"step": 10', b'"step": 1' + b"0" * 5000, 1),
        [1],
        75,
    ),
}


def test_a_binary_tail_in_metrics_is_skipped_and_the_run_reported(sweep, capsys):
    """The whole command: a UnicodeDecodeError traceback before."""
    metrics = sweep / "1" / "metrics.jsonl"
    metrics.write_bytes(METRICS_DAMAGE["binary tail"][0](metrics.read_bytes()))
    code, err = _report(capsys, str(sweep), "--out", str(sweep.parent / "out"))
    assert code == 0, err
    assert err == [
        f"gradsync: warning: {metrics}: skipped 3 line(s) that are not metric records, damaged "
        "or cut short (line 11, 12, 13); the rest of the run is reported"
    ]
    rows = _rows(sweep.parent / "out")
    assert sorted(rows) == ["0", "1", "2"] and rows["1"]["status"] == "completed"
    assert rows["1"]["accuracy (%)"] == rows["2"]["accuracy (%)"] == "75.0"


def _read(sweep: Path) -> tuple[list[Run], list[str]]:
    """What ``report`` reads and warns about, without drawing: the runs found, every warning."""
    found = collect_runs([sweep])
    return found.runs, [*found.warnings, *data_warnings(found.runs, name_runs(found.runs))]


@pytest.mark.parametrize("damage", METRICS_DAMAGE, ids=list(METRICS_DAMAGE))
def test_damaged_metrics_lines_are_skipped_with_one_warning(sweep, damage):
    change, bad_lines, accuracy = METRICS_DAMAGE[damage]
    metrics = sweep / "1" / "metrics.jsonl"
    metrics.write_bytes(change(metrics.read_bytes()))
    runs, warnings = _read(sweep)
    (warning,) = [line for line in warnings if str(metrics) in line]
    assert f"skipped {len(bad_lines)} line(s)" in warning
    assert f"(line {', '.join(map(str, bad_lines))})" in warning
    assert [run.status for run in runs] == ["completed"] * 3
    # What was not damaged is read as logged.
    assert runs[1].values("eval/accuracy")[-1] == pytest.approx(accuracy / 100)


def test_an_empty_metrics_file_is_one_warning(sweep):
    (sweep / "1" / "metrics.jsonl").write_bytes(b"")
    runs, warnings = _read(sweep)
    assert f"{sweep / '1' / 'metrics.jsonl'} is empty; the run has no metrics" in warnings
    assert runs[1].status == "completed" and runs[1].records == []


# ---- summary.json ------------------------------------------------------------------------------
def _field(key: str, value: object):
    def change(text: bytes) -> bytes:
        summary = json.loads(text)
        summary[key] = value
        return json.dumps(summary).encode()

    return change


SUMMARY_DAMAGE = {
    "cut short": (lambda text: text[: len(text) // 2], "is damaged ("),
    "random bytes": (lambda text: b"\x93\x11\xfe\x00" * 20, "is damaged ('utf-8' codec"),
    "empty": (lambda text: b"", "is damaged (Expecting value"),
    "not an object": (lambda text: b"[1, 2]", "is not a run summary"),
    "a string for a number": (_field("wall_time_s", "5 s"), 'wall_time_s is "5 s"'),
    "NaN for a number": (_field("pid", math.nan), "(NaN is not a value gradsync writes)"),
    "infinity for a number": (
        lambda text: re.sub(rb'"wall_time_s": [^,]+', b'"wall_time_s": 1e999', text),
        "(wall_time_s is Infinity, not a finite number >= 0)",
    ),
    "an unknown status": (_field("status", "done"), 'status is "done", not one of completed'),
    "overrides not strings": (_field("overrides", [1, 2]), "overrides is [1, 2]"),
    "final not numbers": (_field("final", {"eval/accuracy": "high"}), "final is"),
}


def test_one_damaged_summary_in_a_sweep_is_left_out_of_the_report(sweep, capsys):
    """The whole command: before, the sweep was refused, healthy jobs included."""
    summary = sweep / "1" / "summary.json"
    summary.write_bytes(SUMMARY_DAMAGE["random bytes"][0](summary.read_bytes()))
    code, err = _report(capsys, str(sweep), "--out", str(sweep.parent / "out"))
    assert code == 0, err
    assert err == [
        f"gradsync: warning: {summary} is damaged ('utf-8' codec can't decode byte 0x93 in "
        "position 0: invalid start byte); remove it or the run directory; the run is left out"
    ]
    rows = _rows(sweep.parent / "out")
    assert sorted(rows) == ["0", "2"]
    assert [rows[job]["status"] for job in "02"] == ["completed", "completed"]


@pytest.mark.parametrize("damage", SUMMARY_DAMAGE, ids=list(SUMMARY_DAMAGE))
def test_a_damaged_summary_is_one_warning_and_leaves_out_its_run(sweep, damage):
    change, reason = SUMMARY_DAMAGE[damage]
    summary = sweep / "1" / "summary.json"
    summary.write_bytes(change(summary.read_bytes()))
    runs, warnings = _read(sweep)
    (warning,) = [line for line in warnings if str(summary) in line]
    assert warning.startswith(f"{summary} ") and reason in warning
    assert warning.endswith("; the run is left out")
    assert [run.path.name for run in runs] == ["0", "2"]


def test_no_usable_run_is_one_error_line(sweep, capsys):
    for job in ("0", "1", "2"):
        (sweep / job / "summary.json").write_bytes(b"{")
    code, err = _report(capsys, str(sweep), "--out", str(sweep.parent / "out"))
    assert code == 2
    assert err == [
        f"gradsync: error: no run to report: {sweep / '0' / 'summary.json'} is damaged "
        "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1)); remove "
        "it or the run directory (2 more run(s) left out as well)"
    ]
    assert not (sweep.parent / "out").exists()


def test_a_damaged_summary_is_a_row_of_the_sweep_summary(sweep, capsys):
    (sweep / "1" / "summary.json").write_bytes(b'{"status": "completed", "final": []}')
    (sweep / "jobs.txt").write_bytes((sweep / "jobs.txt").read_bytes() + b"\xff\xfe\n")
    assert sweep_main(["--summarize", str(sweep)]) == 1  # a job is not completed
    out = capsys.readouterr()
    assert out.err == ""
    lines = out.out.splitlines()
    assert lines[0] == "job 0: completed"
    assert lines[1] == (
        f"job 1: damaged: {sweep / '1' / 'summary.json'} is damaged (final is [], not an object "
        "of finite numbers); remove it or the run directory"
    )
    assert lines[3] == "job 3: missing: no summary.json: the job was killed or never started"


# ---- the Hydra files and jobs.txt --------------------------------------------------------------
YAML_DAMAGE = {
    ".hydra/config.yaml": b"compressor: {density: [0.1\n",
    ".hydra/hydra.yaml": b"\xff\xfe\x00h\x00y",
    ".hydra/overrides.yaml": b"just: a mapping\n",
}


@pytest.mark.parametrize("name", YAML_DAMAGE, ids=list(YAML_DAMAGE))
def test_a_damaged_hydra_file_is_one_warning_and_the_run_is_read(sweep, name):
    (sweep / "1" / name).write_bytes(YAML_DAMAGE[name])
    runs, warnings = _read(sweep)
    (warning,) = [line for line in warnings if str(sweep / "1" / name) in line]
    assert "is damaged (" in warning and warning.endswith("; the run is read without it")
    # The density still names the run: from the overrides, or from the config.
    assert [show(run.setting("compressor.density")) for run in runs] == list(map(str, DENSITIES))


def test_a_damaged_jobs_file_is_one_warning(sweep):
    shutil.rmtree(sweep / "2")
    (sweep / "jobs.txt").write_bytes(b"compressor.density=0.01\n'unclosed\ncompressor=none\n")
    runs, warnings = _read(sweep)
    assert f"{sweep / 'jobs.txt'}: skipped line(s) 2, not shell words" in warnings
    assert [(run.path.name, run.status) for run in runs][2] == ("2", NOT_STARTED)
    (sweep / "jobs.txt").write_bytes(b"\x80\x81\n")
    runs, warnings = _read(sweep)
    assert len(runs) == 2 and any("jobs.txt is damaged ('utf-8' codec" in w for w in warnings)


# ---- any damage to any file --------------------------------------------------------------------
def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@st.composite
def _damage(draw, names: list[str]) -> tuple[str, str, int, bytes]:
    """(file, how, where, bytes): cut at a length, overwrite from a point, replace, append,
    empty."""
    name = draw(st.sampled_from(names))
    how = draw(st.sampled_from(["cut", "overwrite", "replace", "append", "empty"]))
    return name, how, draw(st.integers(0, 4000)), draw(st.binary(min_size=1, max_size=64))


def _damaged(text: bytes, how: str, where: int, noise: bytes) -> bytes:
    at = where % (len(text) + 1)
    return {
        "cut": text[:at],
        "overwrite": text[:at] + noise + text[at + len(noise) :],
        "replace": noise,
        "append": text + noise,
        "empty": b"",
    }[how]


SWEEP_FILES = sorted(
    f"{job}/{name}"
    for job in "01"
    for name in (
        "metrics.jsonl",
        "summary.json",
        ".hydra/config.yaml",
        ".hydra/hydra.yaml",
        ".hydra/overrides.yaml",
    )
)


@settings(max_examples=40, deadline=None)
@given(damages=st.lists(_damage([*SWEEP_FILES, "jobs.txt"]), min_size=1, max_size=3))
def test_any_damage_is_warnings_or_one_error_line_and_changes_nothing(written, damages):
    with tempfile.TemporaryDirectory() as scratch:
        sweep = Path(shutil.copytree(written, Path(scratch) / "sweep"))
        shutil.rmtree(sweep / "2")  # two jobs: every example is cheap
        for name, how, where, noise in damages:
            path = sweep / name
            path.write_bytes(_damaged(path.read_bytes(), how, where, noise))
        before = _files(sweep)
        try:
            found = collect_runs([sweep])
        except ReportError as exc:
            assert "\n" not in str(exc) and "summary.json" in str(exc)
        else:
            assert found.runs and all("\n" not in warning for warning in found.warnings)
            # What the table and its notes make of the damaged records: no exception.
            naming = name_runs(found.runs)
            table = build_table(found.runs, naming, {"eval/accuracy": 0.6})
            to_markdown(found.runs, table.columns)
            to_csv(found.runs, table.columns)
            data_warnings(found.runs, naming)
        assert _files(sweep) == before
