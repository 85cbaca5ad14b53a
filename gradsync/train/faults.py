"""Deliberate failures for testing how a job dies, ``GRADSYNC_FAULT=rank:step[:hang|:inf]``,
a deliberate straggler, ``GRADSYNC_SLOW=rank:seconds`` (that rank takes that much longer every
step), and the one-line forms of a collective timeout and of a peer lost in a collective.

Rank ``rank`` raises at optimizer step ``step`` (with ``:hang``, it stops responding instead,
like a worker stuck outside a collective its peers are waiting in; with ``:inf``, its gradients
at that step overflow, what ``trainer.precision=fp16`` must survive by skipping the step on
every worker). Used by the tests of failure propagation (and by anyone who wants to see what a
crashed worker looks like); unset, it does nothing.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch.distributed as dist

from gradsync.launch import PeerLost

if TYPE_CHECKING:
    from torch import Tensor


class InjectedFault(RuntimeError):
    pass


class CommTimeout(RuntimeError):
    """A collective got no reply from a peer within ``trainer.comm_timeout_s``."""


def as_comm_timeout(exc: BaseException, timeout_s: int) -> CommTimeout | None:
    """The one-line error for a backend's collective timeout (gloo: "Timed out waiting ...ms
    for recv operation"; NCCL: "Watchdog caught collective operation timeout"), or None."""
    text = str(exc).lower()
    if isinstance(exc, RuntimeError) and ("timed out" in text or "timeout" in text):
        return CommTimeout(
            f"no reply from a peer within trainer.comm_timeout_s={timeout_s} s inside a "
            "collective: a worker hung or died"
        )
    return None


# What a backend says when the other end of a connection went away. gloo: "Connection closed by
# peer", "Read error [addr]: Connection reset by peer", "Write error [addr]: Broken pipe" (each
# after "[...gloo/transport/tcp/pair.cc:N]"); NCCL: ncclRemoteError's "remote process exited or
# there was a network error", "NCCL communicator was aborted" (its watchdog saw a peer's error).
_LOST_CONNECTION = re.compile(
    r"connection (?:closed|reset) by peer|broken pipe|gloo\S*\].*(?:read|write) error"
    r"|remote process exited|ncclremoteerror|remote error detected|communicator was aborted"
)


def as_peer_lost(exc: BaseException) -> PeerLost | None:
    """The one-line error for a rank whose peer went away, or None. Looks at ``exc`` and what
    it was raised from (``raise ... from``): torch's own type first (``DistNetworkError``: the
    job's store, which rank 0 hosts, is gone), then what gloo and NCCL say in a collective.
    A CommTimeout is said in its own line already."""
    if isinstance(exc, CommTimeout):
        return None
    for error in raised_from(exc):
        if isinstance(error, dist.DistNetworkError):
            lost = "the job's store"
        elif isinstance(error, RuntimeError) and _LOST_CONNECTION.search(str(error).lower()):
            lost = "a peer in a collective"
        else:
            continue
        return PeerLost(
            f"lost its connection to {lost}: another rank died or was stopped, or the network "
            "failed"
        )
    return None


def raised_from(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then each exception it was explicitly raised from."""
    seen: list[BaseException] = []
    error: BaseException | None = exc
    while error is not None and not any(error is s for s in seen):
        seen.append(error)
        yield error
        error = error.__cause__


class FaultPlan:
    def __init__(self, *, rank: int, spec: str | None = None, slow_spec: str | None = None) -> None:
        spec = os.environ.get("GRADSYNC_FAULT") if spec is None else spec
        slow_spec = os.environ.get("GRADSYNC_SLOW") if slow_spec is None else slow_spec
        self.step: int | None = None
        self.hang = False
        self.overflow = False
        self.delay_s = 0.0
        if spec:
            fault_rank, fault_step, *mode = spec.split(":")
            if int(fault_rank) == rank:
                self.step = int(fault_step)
                self.hang = mode == ["hang"]
                self.overflow = mode == ["inf"]
        if slow_spec:  # a straggler: rank:seconds of extra time every step
            slow_rank, seconds = slow_spec.split(":")
            if int(slow_rank) == rank:
                self.delay_s = float(seconds)

    def check(self, step: int) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.step is None or step != self.step or self.overflow:
            return
        if self.hang:
            while True:  # until the launcher stops this worker
                time.sleep(1)
        raise InjectedFault(f"injected failure at step {step} (GRADSYNC_FAULT)")

    def differentiated(self, loss: Tensor, step: int) -> Tensor:
        """What backward starts from: ``loss``, or at an ``:inf`` fault's step ``loss`` times
        inf, so every gradient is inf or NaN (the logged loss stays the true one)."""
        if self.overflow and step == self.step:
            return loss * float("inf")
        return loss
