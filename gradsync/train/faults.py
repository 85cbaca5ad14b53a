"""Deliberate failures for testing how a job dies: ``GRADSYNC_FAULT=rank:step``.

Rank ``rank`` raises at optimizer step ``step``. Used by the tests of failure propagation (and
by anyone who wants to see what a crashed worker looks like); unset, it does nothing.
"""

from __future__ import annotations

import os


class InjectedFault(RuntimeError):
    pass


class FaultPlan:
    def __init__(self, *, rank: int, spec: str | None = None) -> None:
        spec = os.environ.get("GRADSYNC_FAULT") if spec is None else spec
        self.step: int | None = None
        if spec:
            fault_rank, fault_step = (int(x) for x in spec.split(":"))
            if fault_rank == rank:
                self.step = fault_step

    def check(self, step: int) -> None:
        if self.step is not None and step == self.step:
            raise InjectedFault(f"injected failure at step {step} (GRADSYNC_FAULT)")
