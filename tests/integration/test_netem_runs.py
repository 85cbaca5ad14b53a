"""``runner=netem``: real namespaces, veths and tc shaping. Training slows down as the links get
slower, the probe sees the configured rate, and nothing is left behind after a run, a failed
worker or Ctrl-C."""

from __future__ import annotations

import signal
import statistics
import subprocess

import pytest

from runners.testbed import missing_requirement
from tests.helpers.cli import metrics, run_cli, summary
from tests.helpers.jobs import start_long_job, workers_of

pytestmark = pytest.mark.skipif(
    missing_requirement() is not None, reason=str(missing_requirement())
)

RATES_MBIT = {"1gbit": 1000.0, "10mbit": 10.0}


def _namespaces() -> set[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in listing.stdout.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def sweep(gradsync_cmd, module_cli_env, tmp_path_factory):
    before = _namespaces()
    sweep_dir = tmp_path_factory.mktemp("netem")
    result = run_cli(
        gradsync_cmd,
        "run",
        "-m",
        "runner=netem",
        f"runner.bandwidth={','.join(RATES_MBIT)}",
        "trainer.max_steps=30",
        f"hydra.sweep.dir={sweep_dir}",
        env=module_cli_env,
    )
    assert result.returncode == 0, result.stderr
    return {rate: sweep_dir / str(num) for num, rate in enumerate(RATES_MBIT)}, before


def test_iteration_time_grows_as_bandwidth_shrinks(sweep):
    runs, _ = sweep
    times = {}
    for rate, run_dir in runs.items():
        windows = [m["time/iteration"] for m in metrics(run_dir) if "time/iteration" in m]
        times[rate] = statistics.median(windows)
    # The CNN's 153 kB gradient takes ~1.2 ms at 1 Gbit/s and ~122 ms at 10 Mbit/s.
    assert times["10mbit"] > 5 * times["1gbit"], times


@pytest.mark.parametrize("rate", list(RATES_MBIT))
def test_the_link_rate_and_a_probe_of_it_are_logged(sweep, rate):
    runs, _ = sweep
    first = next(m for m in metrics(runs[rate]) if "runner/link_mbit" in m)
    assert first["runner/link_mbit"] == RATES_MBIT[rate]
    assert 0.5 * RATES_MBIT[rate] < first["runner/probe_mbit"] < 1.1 * RATES_MBIT[rate]


def test_namespaces_are_removed_after_the_runs(sweep):
    _, before = sweep
    assert _namespaces() == before


def test_a_failed_worker_still_tears_the_network_down(gradsync_cmd, cli_env, tmp_path):
    before = _namespaces()
    run_dir = tmp_path / "run"
    result = run_cli(
        gradsync_cmd,
        "run",
        "runner=netem",
        "trainer.max_steps=30",
        f"hydra.run.dir={run_dir}",
        env={**cli_env, "GRADSYNC_FAULT": "1:4"},
    )
    assert result.returncode == 1
    assert "rank 1 failed: InjectedFault" in summary(run_dir)["error"]
    assert _namespaces() == before


def test_ctrl_c_stops_the_workers_and_tears_the_network_down(gradsync_cmd, cli_env, tmp_path):
    before = _namespaces()
    run_dir = tmp_path / "run"
    job = start_long_job(gradsync_cmd, cli_env, run_dir, "runner=netem")
    try:
        assert _namespaces() > before  # the testbed is up while it trains
        job.send_signal(signal.SIGINT)
        job.communicate(timeout=30)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 130
    assert workers_of(run_dir) == {}
    assert _namespaces() == before
