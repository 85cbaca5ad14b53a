"""``pytest -m gpu`` as the last piece of ``benchmarks.gpu``: a subprocess whose output goes to
the console as it comes, stopped when the command's minutes run out the way Ctrl-C stops it
(so pytest still prints its summary of what ran). It reports every test's outcome (``-rA``)
and every failure's traceback in full (``--tb=long``), and writes a JUnit XML file."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.measure import kill_group

REPO = Path(__file__).resolve().parents[1]
PYTEST = ("-m", "gpu", "-o", "addopts=", "-rA", "--tb=long", "--durations=15")
"""pytest's options: the ``gpu`` tests without the project's default options (``addopts``),
every outcome reported and every failure's traceback in full, and the slowest tests named."""
COMMAND = ("-m", "pytest", *PYTEST, "-p", "no:cacheprovider")
SUMMARY = re.compile(r"\b(passed|failed|errors?|skipped|deselected|no tests ran)\b.* in [\d.]+s")
SUMMARY_GRACE_S = 30.0
"""How long pytest has, once interrupted, to stop its tests and print its summary."""


@dataclass(frozen=True)
class TestsResult:
    summary: str
    """pytest's summary line (what passed, failed, was skipped, and how long it took)."""
    returncode: int | None
    stopped_after_s: float | None = None
    """Set when the tests were stopped to keep within the command's minutes."""

    def __str__(self) -> str:
        if self.stopped_after_s is None:
            return self.summary
        return f"{self.summary} (stopped after {self.stopped_after_s:.0f} s, the time left)"


def summary_line(output: str) -> str:
    """pytest's last summary line in ``output``, without its rule of ``=``."""
    found = [line.strip("= ") for line in output.splitlines() if SUMMARY.search(line)]
    return found[-1] if found else "no summary line: pytest ended before printing one"


def gpu_tests(
    timeout_s: float, selection: Sequence[str] = (), junit: Path | None = None
) -> TestsResult:
    """``pytest -m gpu`` (on ``selection``: test paths, default the whole suite) from the
    repository root; stopped after ``timeout_s`` seconds. With ``junit``, its JUnit XML file
    there."""
    xml = [] if junit is None else [f"--junitxml={junit.resolve()}"]
    command = [sys.executable, *COMMAND, *xml, *selection]
    lines: list[str] = []
    with subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the runs its tests start stop with it
    ) as process:
        echo = threading.Thread(target=_echo, args=(process, lines), daemon=True)
        echo.start()
        stopped = None
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stopped = timeout_s
            process.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=SUMMARY_GRACE_S)
        finally:
            kill_group(process)  # what its tests started and left, or all of it if need be
        echo.join(timeout=SUMMARY_GRACE_S)
    return TestsResult(summary_line("".join(lines)), process.returncode, stopped)


def _echo(process: subprocess.Popen[str], lines: list[str]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)
        print(line, end="", file=sys.stderr, flush=True)
