"""The emulated cluster's pieces that need no root: rates, names, and the one-line refusals."""

from __future__ import annotations

import os

import pytest

from gradsync.cluster import host_checks
from gradsync.cluster.rates import rate_mbit
from gradsync.comm.solo import SoloCollective
from gradsync.jobs.compose import ConfigError, compose_jobs
from runners.netem import worker_env
from runners.testbed import MIN_BURST_BYTES, NamedHosts, ShapedNetwork, default_burst
from tests.helpers.dist import run_world


@pytest.mark.parametrize(
    ("rate", "mbit"), [("100mbit", 100.0), ("1gbit", 1000.0), ("500kbit", 0.5), ("2.5gbit", 2500.0)]
)
def test_rates_read_as_tc_writes_them(rate, mbit):
    assert rate_mbit(rate) == mbit


@pytest.mark.parametrize(
    ("rate", "burst"), [("100mbit", "25000"), ("1gbit", "250000"), ("1mbit", str(MIN_BURST_BYTES))]
)
def test_the_default_bucket_holds_two_milliseconds_of_the_link_or_two_frames(rate, burst):
    assert default_burst(rate) == burst


@pytest.mark.parametrize("rate", ["fast", "100", "100mbps", "1 gbit", ""])
def test_malformed_rates_are_refused(rate):
    with pytest.raises(ValueError, match="is not a rate like 100mbit"):
        rate_mbit(rate)


def test_every_worker_gets_its_own_namespace_and_address():
    net = ShapedNetwork(workers=4, rate="1gbit")
    assert len(set(net.namespaces)) == len(set(net.addresses)) == 4
    assert len({a.rsplit(".", 1)[0] for a in net.addresses}) == 1  # one /24
    assert net.command(2, ["python", "-V"]) == [
        "ip",
        "netns",
        "exec",
        net.namespaces[2],
        "python",
        "-V",
    ]
    # Interface names must fit the kernel's 15 characters.
    assert len(f"{net.prefix}v{net.workers - 1}a") <= 15


def test_named_hosts_resolve_every_name_to_its_host_s_address(tmp_path):
    net = ShapedNetwork(workers=2, rate="1gbit")
    hosts = NamedHosts(net, ["node0", "node1"], tmp_path / "hosts")
    table = dict(line.split()[::-1] for line in (tmp_path / "hosts").read_text().splitlines())
    assert table == {"localhost": "127.0.0.1", "node0": net.addresses[0], "node1": net.addresses[1]}
    command = hosts.command(1, ["python", "-V"])
    assert f"--net=/run/netns/{net.namespaces[1]}" in command
    assert command[-4:] == ["node1", str(tmp_path / "hosts"), "python", "-V"]
    with pytest.raises(ValueError, match="2 hosts need 2 names"):
        NamedHosts(net, ["node0"], tmp_path / "other")


def test_without_root_the_refusal_is_one_line(monkeypatch):
    monkeypatch.setattr(host_checks.os, "geteuid", lambda: 1000)
    problem = host_checks.missing_netem_requirement()
    assert problem is not None and "needs root" in problem and "\n" not in problem


def test_without_iproute2_the_refusal_names_the_package(monkeypatch):
    monkeypatch.setattr(host_checks.os, "geteuid", lambda: 0)
    monkeypatch.setattr(host_checks.shutil, "which", lambda tool: None)
    assert "apt-get install iproute2" in str(host_checks.missing_netem_requirement())


# ---- the second link (runner.second_bandwidth) ------------------------------------------------
def test_a_second_link_gets_its_own_subnet_and_names():
    net = ShapedNetwork(workers=4, rate="1gbit", second_rate="50mbit")
    assert len(set(net.second_addresses)) == 4
    assert not set(net.second_addresses) & set(net.addresses)
    first = {a.rsplit(".", 1)[0] for a in net.addresses}
    second = {a.rsplit(".", 1)[0] for a in net.second_addresses}
    assert len(second) == 1 and second != first  # one /24 of its own
    assert len(f"{net.prefix}s{net.workers - 1}a") <= 15
    env = worker_env(net, 1)
    assert (env["GRADSYNC_SECOND_IFNAME"], env["GRADSYNC_SECOND_LINK_MBIT"]) == ("eth1", "50")
    assert env["GLOO_SOCKET_IFNAME"] == "eth0"  # the default group stays on the first link


def test_without_a_second_rate_there_is_one_link():
    net = ShapedNetwork(workers=2, rate="1gbit")
    assert net.second_addresses == []
    assert not any(key.startswith("GRADSYNC_SECOND") for key in worker_env(net, 0))


def test_a_malformed_second_rate_is_refused_in_one_line():
    with pytest.raises(ConfigError) as info:
        compose_jobs(["runner=netem", "runner.second_bandwidth=fast"], multirun=False)
    text = str(info.value)
    assert "runner.second_bandwidth 'fast' is not a rate like 100mbit or 1gbit" in text
    assert "\n" not in text
    with pytest.raises(ValueError, match="second_bandwidth '50 mbit' is not a rate"):
        ShapedNetwork(workers=2, rate="1gbit", second_rate="50 mbit")


def test_a_well_formed_second_rate_composes():
    jobs = compose_jobs(["runner=netem", "runner.second_bandwidth=50mbit"], multirun=False)
    assert jobs[0].runner.second_bandwidth == "50mbit"


def _fork_onto(rank: int, world_size: int) -> list[str | None]:
    """Fork onto an interface that does not exist (gloo refuses it), then onto loopback; what
    GLOO_SOCKET_IFNAME reads after each."""
    from gradsync.comm.collective import TorchCollective

    collective = TorchCollective()
    seen = [os.environ.get("GLOO_SOCKET_IFNAME")]
    with pytest.raises(RuntimeError, match="gsnope0"):
        collective.fork(interface="gsnope0")
    seen.append(os.environ.get("GLOO_SOCKET_IFNAME"))
    forked = collective.fork(interface="lo")
    seen.append(os.environ.get("GLOO_SOCKET_IFNAME"))
    assert forked.world_size == world_size
    return seen


def test_forking_onto_an_interface_restores_gloo_s_choice_also_on_error(tmp_path, monkeypatch):
    # Unset before, so it must be unset again after (not left as the forked group's interface).
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    assert run_world(_fork_onto, 1, tmp_path) == [[None, None, None]]


def test_a_solo_collective_forks_onto_any_interface():
    assert isinstance(SoloCollective().fork(interface="eth1"), SoloCollective)
