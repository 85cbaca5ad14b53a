"""A cluster as the cost models see it, and what one collective costs on it (α-β models).

Every worker has one network link of ``bandwidth`` bits/s and a per-message ``latency``. With
``gpus_per_node`` > 1 the workers are grouped into nodes whose GPUs talk at ``intra_bandwidth``;
a collective then runs inside each node first and between the nodes after (the TernGrad paper's
appendix B). ``algorithm`` is the collective algorithm between nodes:

* ``ring``: all-reduce in 2(n−1) steps of M/n each; all-gather in n−1 steps of one payload.
* ``tree``: recursive doubling, log2(n) steps. For an all-reduce every step carries the whole
  message, ``log2(n)·(λ + M/B)``: appendix B's ``t_inter``. An all-gather doubles what it carries
  each step, so its bytes equal the ring's but it pays only log2(n) start-ups.

A parameter server takes every worker's push and answers every pull on its own full-duplex link,
so with ``servers`` shards a synchronous round costs about ``n·M/(servers·B)`` per direction,
the two directions taking turns (``servers_busy``).

A cluster may instead give a collective's measured cost, ``t = α + β·size`` (``fitted``), for
every worker count or for some: one start-up cannot fit both a dense all-reduce at line rate
and the 22 ms of a 16-node all-gather over 1 GbE. ``size`` is what nccl-tests reports for the
collective (the output buffer): the bytes of an all-reduce or a broadcast, everyone's bytes of
an all-gather, one message of a point-to-point send. Such a fit prices the whole collective,
inside nodes and between them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

ALGORITHMS = ("ring", "tree")
LAN_LATENCY_S = 5e-5  # one message's start-up on a local network (as gradsync plan assumes)
# Payload bytes per byte a link carries for a bulk TCP stream over Ethernet: 1448 of every
# 1514-byte frame (MSS with timestamps, of the MTU plus the Ethernet header, as tc counts).
# On this machine's shaped links, 12 all_reduces of 4 MB took 1.205 s against 1.152 s at the
# raw rate: 0.956, this very ratio.
TCP_PAYLOAD_SHARE = 1448 / 1514
COLLECTIVES = ("all_reduce", "all_gather", "broadcast", "point_to_point")
"""The collectives a cluster can give a measured α-β fit of (``Cluster.fitted``)."""


@dataclass(frozen=True)
class AlphaBeta:
    """A collective's measured cost ``alpha + beta·size`` (size: nccl-tests' bytes)."""

    alpha: float
    """Seconds of start-up."""
    beta: float
    """Seconds per byte of the collective's size."""
    workers: int | None = None
    """The worker count it was measured at; None: every count without one of its own."""

    def seconds(self, size: float) -> float:
        return self.alpha + self.beta * size


@dataclass(frozen=True)
class Cluster:
    workers: int
    bandwidth_bps: float
    """Each worker's network link, bits per second."""
    latency_s: float = LAN_LATENCY_S
    algorithm: str = "ring"
    gpus_per_node: int = 1
    intra_bandwidth_bps: float = 0.0
    """Between the GPUs of one node (appendix B's B_g); only used when gpus_per_node > 1."""
    servers: int = 1
    second_bandwidth_bps: float | None = None
    """A second link (DeFT's), when the cluster has one."""
    shared_host_cores: int | None = None
    """All processes run on one host of this many cores (this machine under runner=netem).
    None: every worker has a machine of its own."""
    threads_per_worker: int = 1
    """Compute threads of each worker (``trainer.threads_per_worker``), for sharing a host."""
    call_s: Mapping[str, float] = field(default_factory=dict)
    """Mean measured seconds of a one-element ``all_reduce``, ``all_gather`` or ``broadcast``
    between these workers (a shared host's shaped links) made after computing, paid by every
    such call instead of the start-ups of the formulas below."""
    overlapped_call_s: Mapping[str, float] = field(default_factory=dict)
    """The same, made back to back by a communication thread while the workers compute (a
    pipelined scheduler's calls): ``overlapped()`` prices calls with these."""
    idle_call_s: Mapping[str, float] = field(default_factory=dict)
    """The same, made back to back once no worker computes (``idle()``): on a shared host's
    oversubscribed cores, a fraction of what they cost while the workers compute."""
    meeting_call_s: Mapping[str, float] = field(default_factory=dict)
    """What the first call of an exchange costs when it differs from ``call_s`` (set by
    ``overlapped()``): the workers meet there after each did its own share of work, so it
    costs what a call after computing does, not one of a back-to-back run."""
    sync_s: float = 0.0
    """Added once per synchronous iteration: waiting for the last worker's share of the
    cores, on a shared host."""
    second_link_mu: float | None = None
    """Measured: how many times longer the second link carries the same bytes (on a shared
    host; otherwise the ratio of the two bandwidths stands for it)."""
    busy_link_slowdown: Mapping[str, float] = field(default_factory=dict)
    """On a shared host, how many times longer computing takes while a set of links carries
    data (``simulator.busy_links_key``): moving the bytes takes its share of the cores."""
    fitted: Mapping[str, tuple[AlphaBeta, ...]] = field(default_factory=dict)
    """Measured costs of collectives (``COLLECTIVES``), which price them instead of the link's
    formulas at the worker counts they cover (``fit``)."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if not 0 < self.bandwidth_bps < math.inf:
            raise ValueError(f"bandwidth must be > 0 and finite, got {self.bandwidth_bps}")
        if self.algorithm not in ALGORITHMS:
            raise ValueError(
                f"unknown collective algorithm {self.algorithm!r}; valid: {', '.join(ALGORITHMS)}"
            )
        if self.gpus_per_node < 1 or self.workers % self.gpus_per_node:
            raise ValueError(
                f"gpus_per_node={self.gpus_per_node} must be >= 1 and divide the "
                f"{self.workers} workers"
            )
        if self.gpus_per_node > 1 and not self.intra_bandwidth_bps > 0:
            raise ValueError("a cluster with several GPUs per node needs intra_bandwidth")
        if not 0 <= self.latency_s < math.inf:  # NaN too: it would price every call as NaN
            raise ValueError(f"latency must be >= 0 and finite, got {self.latency_s}")
        unknown = sorted(set(self.fitted) - set(COLLECTIVES))
        if unknown:
            raise ValueError(
                f"no collective {unknown[0]!r} to fit; valid: {', '.join(COLLECTIVES)}"
            )

    def fit(self, collective: str) -> AlphaBeta | None:
        """The measured cost of ``collective`` at this worker count: the fit made at this
        count, else the one for every count; None when neither is given."""
        fits = self.fitted.get(collective, ())
        exact = [f for f in fits if f.workers == self.workers]
        general = [f for f in fits if f.workers is None]
        chosen = exact or general
        return chosen[0] if chosen else None

    @property
    def compute_slowdown(self) -> float:
        """How many times longer each worker computes than the profile taken alone: workers
        of a synchronous job compute at the same moments, so when their threads outnumber a
        shared host's cores each gets ``cores / threads`` of the time it needs."""
        if self.shared_host_cores is None:
            return 1.0
        return max(1.0, self.workers * self.threads_per_worker / self.shared_host_cores)

    @property
    def payload_bps(self) -> float:
        """Bits of payload per second a link carries: its rate less the TCP/IP and Ethernet
        headers of every frame."""
        return self.bandwidth_bps * TCP_PAYLOAD_SHARE

    @property
    def nodes(self) -> int:
        return self.workers // self.gpus_per_node

    def with_workers(self, workers: int) -> Cluster:
        return replace(self, workers=workers)

    def overlapped(self) -> Cluster:
        """This cluster for calls made from a communication thread while computing: back to
        back within an exchange, but meeting at its first call (``meeting()``)."""
        if not self.overlapped_call_s:
            return self
        return replace(self, call_s=self.overlapped_call_s, meeting_call_s=self.call_s)

    def idle(self) -> Cluster:
        """This cluster for calls made back to back after every worker has finished
        computing (a pipelined scheduler's exchanges left after backward)."""
        if not self.idle_call_s:
            return self
        return replace(self, call_s=self.idle_call_s, meeting_call_s={})

    def meeting(self) -> Cluster:
        """This cluster for the first call of an exchange (a bucket, a group): the workers
        arrive at it out of step, each after its own compute or selection."""
        if not self.meeting_call_s:
            return self
        return replace(self, call_s=self.meeting_call_s, meeting_call_s={})

    def second_link(self) -> Cluster | None:
        """The cluster over the second link, which only its bandwidth describes."""
        if self.second_bandwidth_bps is None:
            return None
        return replace(
            self, bandwidth_bps=self.second_bandwidth_bps, second_bandwidth_bps=None, fitted={}
        )

    # ---- collectives: seconds for one worker, given the bytes it contributes -----------------
    def _start_up(self, op: str, formula: float) -> float:
        return self.call_s.get(op, formula)

    def all_reduce(self, nbytes: float) -> float:
        if self.workers == 1:
            return 0.0
        fit = self.fit("all_reduce")
        if fit is not None:
            return fit.seconds(nbytes)
        intra = _intra_all_reduce(nbytes, self.gpus_per_node, self.intra_bandwidth_bps)
        return intra + self._between_nodes_all_reduce(nbytes, self.nodes)

    def all_gather(self, nbytes: float) -> float:
        """Every worker contributes ``nbytes`` and receives everyone's."""
        if self.workers == 1:
            return 0.0
        fit = self.fit("all_gather")
        if fit is not None:
            return fit.seconds(self.workers * nbytes)
        g = self.gpus_per_node
        intra = (g - 1) * nbytes * 8 / self.intra_bandwidth_bps if g > 1 else 0.0
        # Between nodes each node's whole share (g payloads) travels.
        n = self.nodes
        if n == 1:
            return intra
        starts = (n - 1 if self.algorithm == "ring" else math.ceil(math.log2(n))) * self.latency_s
        wire = (n - 1) * g * nbytes * 8 / self.payload_bps
        return intra + self._start_up("all_gather", starts) + wire

    def broadcast(self, nbytes: float) -> float:
        n = self.workers
        if n == 1:
            return 0.0
        fit = self.fit("broadcast")
        if fit is not None:
            return fit.seconds(nbytes)
        hops = math.ceil(math.log2(n))
        start = self._start_up("broadcast", hops * self.latency_s)
        return start + hops * nbytes * 8 / self.payload_bps

    def push_pull(self, push_bytes: float, pull_bytes: float) -> float:
        """One synchronous parameter-server round: every worker pushes, then pulls."""
        return 2 * self._message_start_up() + self.servers_busy(push_bytes, pull_bytes)

    def servers_busy(self, push_bytes: float, pull_bytes: float) -> float:
        """Seconds each server's link needs per round for everyone's traffic (incast): the
        least an asynchronous round can take. The link shares itself fairly among the flows
        on it (TCP), so the pushes of workers that start together end together, and so do the
        pulls the server then sends to all of them at once: the two directions take turns
        instead of overlapping, and workers that stay in step keep taking turns. (Measured
        under runner=netem, 4 workers and a server at 20 Mbit/s: 501 ms per BSP round and 464
        ms per ASP one, against 513 ms for both directions in turn and 256 ms for one.)"""
        per_server = self.workers / self.servers
        return per_server * self._message_wire(push_bytes + pull_bytes)

    def own_push_pull(self, push_bytes: float, pull_bytes: float) -> float:
        """One worker's push and pull when the server's link is free (asynchronous servers)."""
        return 2 * self._message_start_up() + self._message_wire(push_bytes + pull_bytes)

    def _message_start_up(self) -> float:
        fit = self.fit("point_to_point")
        return self.latency_s if fit is None else fit.alpha

    def _message_wire(self, nbytes: float) -> float:
        """Seconds a link takes to carry ``nbytes`` of messages, after their start-ups."""
        fit = self.fit("point_to_point")
        return nbytes * 8 / self.payload_bps if fit is None else fit.beta * nbytes

    def _between_nodes_all_reduce(self, nbytes: float, n: int) -> float:
        if n == 1:
            return 0.0
        if self.algorithm == "ring":
            steps = 2 * (n - 1)
            start = self._start_up("all_reduce", steps * self.latency_s)
            return start + steps / n * nbytes * 8 / self.payload_bps
        hops = math.ceil(math.log2(n))
        start = self._start_up("all_reduce", hops * self.latency_s)
        return start + hops * nbytes * 8 / self.payload_bps


def _intra_all_reduce(nbytes: float, gpus: int, bandwidth_bps: float) -> float:
    """Appendix B's ``t_intra`` without the CPU copy: log2(N_g)·M/B_g."""
    if gpus == 1:
        return 0.0
    return math.ceil(math.log2(gpus)) * nbytes * 8 / bandwidth_bps
