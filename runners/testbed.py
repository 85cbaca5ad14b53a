"""An emulated cluster on one Linux host: one network namespace per worker, joined by a bridge,
every link rate-limited with ``tc``.

Each worker namespace has one interface ``eth0`` (a veth) with an address on a private /24;
the other end sits in the bridge's own namespace, so the host's namespace is never touched.
With a second rate, every worker also gets ``eth1`` on a second bridge and /24 (two NICs per
host, as schedulers that drive two links at once expect), shaped at that rate.
Both ends of every veth get a token-bucket filter at the chosen rate, so a worker's uplink and
downlink are each capped, as on a switched network. The bucket holds what the link carries in
``BURST_S`` unless a burst is given: a real link has no bucket, and one the size of a whole
message lets it leave at the host's speed (measured at 100 Mbit/s, 2 workers, a 50 ms pause
before each all_reduce: with a 256 kB bucket, 86 kB took 0.6 ms and 256 kB 4.3 ms, against
6.9 and 20.5 ms at the rate; with 25 kB, 5.9 and 20.8 ms). Much smaller buckets slow the
link below its rate (4 kB: 11.6 and 25.9 ms). Everything is removed on exit, also after
an error or Ctrl-C. Needs root and iproute2.

Only the rate is shaped (no added delay or loss): the ``netem`` qdisc that would add them is
not in every kernel, so it is not used.

``NamedHosts`` turns the namespaces into the nodes of a cluster: each has a hostname of its own
that every node resolves to its address, as torchrun's rendezvous, gloo and Slurm expect.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import TracebackType

from gradsync.cluster.rates import rate_mbit

INTERFACE = "eth0"
SECOND_INTERFACE = "eth1"
BURST_S = 0.002
MIN_BURST_BYTES = 2 * 1514  # two full Ethernet frames


def default_burst(rate: str) -> str:
    """The token bucket of a link of ``rate``, in bytes as ``tc`` reads them: what the link
    carries in ``BURST_S``, at least two full frames."""
    return str(max(MIN_BURST_BYTES, round(rate_mbit(rate) * 1e6 / 8 * BURST_S)))


class ShapedNetwork:
    """``with ShapedNetwork(workers=4, rate="100mbit") as net:`` then run rank r's command as
    ``net.command(r, argv)``; rank r is reachable at ``net.addresses[r]``. With
    ``second_rate``, rank r is also reachable over ``eth1`` at ``net.second_addresses[r]``."""

    def __init__(
        self,
        *,
        workers: int,
        rate: str,
        second_rate: str | None = None,
        burst: str | None = None,
        queue_ms: int = 50,
    ) -> None:
        rate_mbit(rate)  # fail early on a malformed rate
        if second_rate is not None:
            rate_mbit(second_rate, name="second_bandwidth")
        self.workers = workers
        self.rate, self.second_rate = rate, second_rate
        self.burst, self.queue_ms = burst, queue_ms
        tag = os.getpid()
        self.prefix = f"gs{tag}"
        # A subnet per launcher process, so two jobs on one host do not share addresses; the
        # second link's subnets (10.150-199.*) never overlap the first's (10.200-249.*), so the
        # kernel routes each peer address out of the interface it belongs to.
        subnet = f"10.{200 + tag % 50}.{(tag // 50) % 256}"
        second_subnet = f"10.{150 + tag % 50}.{(tag // 50) % 256}"
        self.addresses = [f"{subnet}.{rank + 1}" for rank in range(workers)]
        self.second_addresses = (
            [f"{second_subnet}.{rank + 1}" for rank in range(workers)]
            if second_rate is not None
            else []
        )
        self.bridge_ns = f"{self.prefix}-br"
        self.namespaces = [f"{self.prefix}-w{rank}" for rank in range(workers)]
        self._created: list[str] = []

    def command(self, rank: int, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[rank], *argv]

    def __enter__(self) -> ShapedNetwork:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _build(self) -> None:
        self._add_namespace(self.bridge_ns)
        bridges = ["br0"] if self.second_rate is None else ["br0", "br1"]
        for bridge in bridges:
            self._in(self.bridge_ns, "ip", "link", "add", bridge, "type", "bridge")
            self._in(self.bridge_ns, "ip", "link", "set", bridge, "up")
        for rank, ns in enumerate(self.namespaces):
            self._add_namespace(ns)
            self._in(ns, "ip", "link", "set", "lo", "up")
            self._link(rank, "v", INTERFACE, "br0", self.addresses[rank], self.rate)
            if self.second_rate is not None:
                address = self.second_addresses[rank]
                self._link(rank, "s", SECOND_INTERFACE, "br1", address, self.second_rate)

    def _link(self, rank: int, kind: str, name: str, bridge: str, address: str, rate: str) -> None:
        """A veth from rank's namespace (where it is called ``name``) to ``bridge``, shaped to
        ``rate`` on both ends. ``kind`` keeps the host-wide veth names of the links apart."""
        ns = self.namespaces[rank]
        # Named per testbed and rank while they still sit in the host's namespace.
        worker_end, bridge_end = f"{self.prefix}{kind}{rank}a", f"{self.prefix}{kind}{rank}b"
        _ip("link", "add", worker_end, "type", "veth", "peer", "name", bridge_end)
        _ip("link", "set", worker_end, "netns", ns)
        _ip("link", "set", bridge_end, "netns", self.bridge_ns)
        self._in(ns, "ip", "link", "set", worker_end, "name", name)
        self._in(ns, "ip", "addr", "add", f"{address}/24", "dev", name)
        self._in(ns, "ip", "link", "set", name, "up")
        self._in(self.bridge_ns, "ip", "link", "set", bridge_end, "master", bridge)
        self._in(self.bridge_ns, "ip", "link", "set", bridge_end, "up")
        self._shape(ns, name, rate)
        self._shape(self.bridge_ns, bridge_end, rate)

    def _shape(self, ns: str, device: str, rate: str) -> None:
        burst = self.burst or default_burst(rate)
        self._in(
            ns, "tc", "qdisc", "add", "dev", device, "root", "tbf",
            "rate", rate, "burst", burst, "latency", f"{self.queue_ms}ms",
        )  # fmt: skip

    def _add_namespace(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._created.append(ns)

    def _in(self, ns: str, *argv: str) -> None:
        _run("ip", "netns", "exec", ns, *argv)

    def close(self) -> None:
        """Delete every namespace this testbed made (their veths and bridges go with them)."""
        while self._created:
            ns = self._created.pop()
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


class NamedHosts:
    """The namespaces of ``network`` as the hosts of a cluster: host i is called ``names[i]``
    (its hostname) and every host resolves each name to that host's address, from an
    /etc/hosts of their own written to ``hosts_file``. ``command(i, argv)`` runs on host i.

    Commands enter the namespace with ``nsenter`` and a mount and UTS namespace of their own,
    not with ``ip netns exec``: that remounts /sys, which hides the cgroup tree slurmd needs.
    The shared hostname is what breaks multi-node jobs in bare namespaces: it resolves to
    127.0.0.1 on every one, so gloo binds to loopback and torchrun's c10d rendezvous finds no
    host for its store and hands out a master address no other node can reach."""

    def __init__(self, network: ShapedNetwork, names: list[str], hosts_file: Path) -> None:
        if len(names) != network.workers:
            raise ValueError(f"{network.workers} hosts need {network.workers} names")
        self.network, self.names, self.hosts_file = network, names, hosts_file
        table = zip(network.addresses, names, strict=True)
        lines = ["127.0.0.1 localhost", *(f"{ip} {name}" for ip, name in table)]
        hosts_file.write_text("\n".join(lines) + "\n")

    def command(self, host: int, argv: list[str]) -> list[str]:
        # The script's $0 is the hostname, $1 the hosts file; the rest is the command.
        script = 'mount --bind "$1" /etc/hosts && hostname "$0" && shift && exec "$@"'
        return [
            "nsenter", f"--net=/run/netns/{self.network.namespaces[host]}",
            "unshare", "--mount", "--uts",
            "sh", "-c", script, self.names[host], str(self.hosts_file), *argv,
        ]  # fmt: skip


def _ip(*argv: str) -> None:
    _run("ip", *argv)


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` failed: {result.stderr.strip()}")
