"""``runner=netem``: real namespaces, veths and tc shaping. Training slows down as the links get
slower, the probe sees the configured rate, and nothing is left behind after a run, a failed
worker or Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gradsync.cluster.host_checks import missing_netem_requirement
from runners.netem import worker_env
from runners.testbed import ShapedNetwork
from tests.helpers.cli import metrics, run_cli, summary
from tests.helpers.jobs import start_long_job, workers_of

pytestmark = pytest.mark.skipif(
    missing_netem_requirement() is not None, reason=str(missing_netem_requirement())
)

RATES_MBIT = {"1gbit": 1000.0, "10mbit": 10.0}
REPO = Path(__file__).resolve().parents[2]


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


@pytest.mark.parametrize(
    ("signum", "code", "status"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_a_stop_signal_stops_the_workers_and_tears_the_network_down(
    gradsync_cmd, cli_env, tmp_path, signum, code, status
):
    before = _namespaces()
    run_dir = tmp_path / "run"
    job = start_long_job(gradsync_cmd, cli_env, run_dir, "runner=netem")
    try:
        assert _namespaces() > before  # the testbed is up while it trains
        job.send_signal(signum)  # Ctrl-C, or `timeout`/`kill`
        job.communicate(timeout=30)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == code
    assert summary(run_dir)["status"] == status
    assert workers_of(run_dir) == {}
    assert _namespaces() == before


# ---- a second link per worker (runner.second_bandwidth) ---------------------------------------
PAYLOAD_BYTES = 4 << 20
ROUNDS = 3


def _tx_bytes(interface: str) -> int:
    # `ip netns exec` mounts the namespace's own sysfs, so these are the worker's interfaces.
    return int(Path(f"/sys/class/net/{interface}/statistics/tx_bytes").read_text())


def two_link_worker() -> None:
    """One rank, run inside its namespace: all-reduces over the default group (eth0) and over a
    group forked onto the second link, taken in turns so both see the same machine load; prints
    the times and what each interface sent while each kind ran, as JSON."""
    import torch
    import torch.distributed as dist

    from gradsync.comm.collective import TorchCollective, second_link_interface

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    collectives = {"default": TorchCollective()}
    collectives["forked"] = collectives["default"].fork(interface=second_link_interface())
    ifname_after_fork = os.environ.get("GLOO_SOCKET_IFNAME")
    buf = torch.ones(PAYLOAD_BYTES // 4)
    for collective in collectives.values():
        collective.all_reduce((buf,))  # warm-up: connections and buffers
    seconds: dict[str, list[float]] = {name: [] for name in collectives}
    sent = {name: {"eth0": 0, "eth1": 0} for name in collectives}
    for _ in range(ROUNDS):
        for name, collective in collectives.items():
            dist.barrier()
            before = {interface: _tx_bytes(interface) for interface in ("eth0", "eth1")}
            start = time.perf_counter()
            collective.all_reduce((buf,))
            seconds[name].append(time.perf_counter() - start)
            for interface, count in before.items():
                sent[name][interface] += _tx_bytes(interface) - count
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps({"seconds": seconds, "sent": sent, "ifname_after_fork": ifname_after_fork}))


def _owned(network: ShapedNetwork) -> set[str]:
    # Only this testbed's namespaces: other jobs on the host may build testbeds of their own.
    return {network.bridge_ns, *network.namespaces} & _namespaces()


def test_a_group_forked_onto_the_second_link_runs_at_its_rate():
    with ShapedNetwork(workers=2, rate="1gbit", second_rate="50mbit") as network:
        assert _owned(network) == {network.bridge_ns, *network.namespaces}
        envs = [worker_env(network, rank) for rank in range(2)]
        assert envs[0]["GRADSYNC_SECOND_IFNAME"] == "eth1"
        assert envs[0]["GRADSYNC_SECOND_LINK_MBIT"] == "50"
        assert envs[0]["GRADSYNC_LINK_MBIT"] == "1000"
        outputs = _run_in(network, "two_link_worker")
    assert not _owned(network)  # torn down with everything else

    for report in outputs:
        assert report["ifname_after_fork"] == "eth0"  # restored for later groups
        seconds = {name: statistics.median(times) for name, times in report["seconds"].items()}
        # 4 MB per rank per all-reduce of two: ~34 ms at 1 Gbit/s, ~0.67 s at 50 Mbit/s.
        assert seconds["forked"] > 5 * seconds["default"], report["seconds"]
        carried = ROUNDS * PAYLOAD_BYTES
        sent = report["sent"]
        assert sent["forked"]["eth1"] > 0.9 * carried, sent
        assert sent["forked"]["eth0"] < 0.05 * carried, sent
        assert sent["default"]["eth0"] > 0.9 * carried, sent
        assert sent["default"]["eth1"] < 0.05 * carried, sent


def _run_in(network: ShapedNetwork, worker: str) -> list[dict]:
    """Run this module's ``worker`` function as every rank of ``network``, each in its own
    namespace; what each printed last, as JSON."""
    code = f"from tests.integration.test_netem_runs import {worker}; {worker}()"
    procs = [
        subprocess.Popen(
            network.command(rank, [sys.executable, "-c", code]),
            cwd=REPO,
            env={
                **os.environ,
                **worker_env(network, rank),
                "RANK": str(rank),
                "WORLD_SIZE": str(network.workers),
                "MASTER_PORT": "29500",  # a fresh namespace: nothing else listens there
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(network.workers)
    ]
    try:
        outputs = [proc.communicate(timeout=60) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, (_, stderr) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, stderr
    return [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in outputs]


# ---- the token bucket: messages take their bytes over the rate ---------------------------------
BUCKET_PROBE_BYTES = 256_000


def paused_all_reduce_worker() -> None:
    """One rank: all_reduces of BUCKET_PROBE_BYTES, each after a pause that refills the
    shaper's bucket (as between iterations); prints their median seconds as JSON."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    buf, times = torch.zeros(BUCKET_PROBE_BYTES // 4), []
    for _ in range(5):
        dist.barrier()
        time.sleep(0.05)
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(buf)
        times.append(time.perf_counter() - start)
    dist.destroy_process_group()
    print(json.dumps({"seconds": statistics.median(times)}))


def test_the_default_bucket_makes_a_paused_message_take_its_bytes_over_the_rate():
    at_rate = BUCKET_PROBE_BYTES * 8 / 100e6  # two ranks: each sends the whole buffer
    seconds = {}
    for burst in (None, "256kb"):
        with ShapedNetwork(workers=2, rate="100mbit", burst=burst) as network:
            seconds[burst] = max(
                report["seconds"] for report in _run_in(network, "paused_all_reduce_worker")
            )
    assert seconds[None] > 0.8 * at_rate, seconds
    # A bucket of the message's size lets most of it leave at the host's speed.
    assert seconds["256kb"] < 0.6 * seconds[None], seconds


def test_a_second_link_is_torn_down_after_an_error():
    with (
        pytest.raises(RuntimeError, match="boom"),
        ShapedNetwork(workers=2, rate="1gbit", second_rate="50mbit") as network,
    ):
        assert len(_owned(network)) == 3
        raise RuntimeError("boom")
    assert not _owned(network)
