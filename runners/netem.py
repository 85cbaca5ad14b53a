"""``runner=netem``: the local runner's workers, each in its own network namespace, talking over
links shaped to ``runner.bandwidth`` (see ``testbed.py``). gloo binds to the namespace's
interface; the configured rate is announced to the workers, which log it as
``runner/link_mbit`` next to a measured all-reduce probe, ``runner/probe_mbit``.

With ``runner.second_bandwidth`` every worker has a second link, ``eth1``, announced as
``GRADSYNC_SECOND_IFNAME`` and ``GRADSYNC_SECOND_LINK_MBIT``; the default process group stays on
``eth0``, and a worker binds a group of its own to ``eth1`` when it wants the second link.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from gradsync.cluster.rates import DEFAULT_RATE, rate_mbit
from gradsync.launch.options import NetemRunnerConfig
from runners.local import LocalRunner
from runners.testbed import INTERFACE, SECOND_INTERFACE, ShapedNetwork


def worker_env(network: ShapedNetwork, rank: int) -> dict[str, str]:
    """What a worker in ``network`` needs to find rank 0 and the links it has."""
    env = {
        "MASTER_ADDR": network.addresses[0],
        "GLOO_SOCKET_IFNAME": INTERFACE,
        "GRADSYNC_LINK_MBIT": f"{rate_mbit(network.rate):g}",
    }
    if network.second_rate is not None:
        env["GRADSYNC_SECOND_IFNAME"] = SECOND_INTERFACE
        env["GRADSYNC_SECOND_LINK_MBIT"] = f"{rate_mbit(network.second_rate):g}"
    return env


class NetworkPlacement:
    """Ranks in the namespaces of ``network``, reaching rank 0 over its shaped links."""

    def __init__(self, network: ShapedNetwork) -> None:
        self.network = network

    def command(self, rank: int, argv: list[str]) -> list[str]:
        return self.network.command(rank, argv)

    def env(self, rank: int) -> dict[str, str]:
        return worker_env(self.network, rank)


class NetemRunner(LocalRunner):
    def __init__(
        self,
        *,
        workers: int,
        colocated: int = 0,
        bandwidth: str = DEFAULT_RATE,
        second_bandwidth: str | None = None,
        burst: str | None = None,
        queue_ms: int = NetemRunnerConfig.queue_ms,
        grace_period_s: float = NetemRunnerConfig.grace_period_s,
    ) -> None:
        super().__init__(workers=workers, grace_period_s=grace_period_s)
        # The last ``colocated`` ranks (parameter servers beside worker 0) share rank 0's
        # namespace, and so its link.
        self.hosts = workers - colocated
        self.bandwidth, self.second_bandwidth = bandwidth, second_bandwidth
        self.burst, self.queue_ms = burst, queue_ms

    @contextmanager
    def placement(self, ranks: int) -> Iterator[NetworkPlacement]:
        """``ranks`` namespaces on links shaped as configured, torn down on every way out:
        success, worker failure, Ctrl-C."""
        with ShapedNetwork(
            workers=ranks,
            rate=self.bandwidth,
            second_rate=self.second_bandwidth,
            burst=self.burst,
            queue_ms=self.queue_ms,
        ) as network:
            yield NetworkPlacement(network)

    def _host(self, rank: int) -> int:
        return rank if rank < self.hosts else 0
