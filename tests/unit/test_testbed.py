"""The emulated cluster's pieces that need no root: rates, names, and the one-line refusals."""

from __future__ import annotations

import pytest

from runners import testbed
from runners.testbed import ShapedNetwork, rate_mbit


@pytest.mark.parametrize(
    ("rate", "mbit"), [("100mbit", 100.0), ("1gbit", 1000.0), ("500kbit", 0.5), ("2.5gbit", 2500.0)]
)
def test_rates_read_as_tc_writes_them(rate, mbit):
    assert rate_mbit(rate) == mbit


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


def test_without_root_the_refusal_is_one_line(monkeypatch):
    monkeypatch.setattr(testbed.os, "geteuid", lambda: 1000)
    problem = testbed.missing_requirement()
    assert problem is not None and "needs root" in problem and "\n" not in problem


def test_without_iproute2_the_refusal_names_the_package(monkeypatch):
    monkeypatch.setattr(testbed.os, "geteuid", lambda: 0)
    monkeypatch.setattr(testbed.shutil, "which", lambda tool: None)
    assert "apt-get install iproute2" in str(testbed.missing_requirement())
