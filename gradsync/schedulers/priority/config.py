"""Options of the priority schedulers, ``bytescheduler`` and ``usbyte``
(docs/methods/schedulers/bytescheduler.md and usbyte.md), each default defined here once.
Torch-free: the command line checks them before importing torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gradsync.config.checks import MAX_ELEMENTS, MAX_PROFILE_STEPS, Rule, option
from gradsync.schedulers.options import SchedulerOptions

# ByteScheduler's defaults (its code): partitions of 1M elements, 4M elements in flight.
PARTITION_SIZE = 1_000_000
CREDIT = 4_000_000
# US-Byte's planner (no published code): partition sizes it considers, steps it profiles.
MIN_PARTITION_SIZE = 65_536
MAX_PARTITION_SIZE = CREDIT
PROFILE_STEPS = 3
MAX_ALPHA_S = 60.0  # a link that takes a minute to start a message is a mistake
MAX_BETA_S = 1.0  # seconds per byte: a link slower than 8 bit/s is a mistake
AGREEMENT = "priority.agreement"
HOST_SYNCS = (
    (
        AGREEMENT,
        "partitions go in priority order once every worker has them ready: the workers agree "
        "on how many are",
    ),
)
"""Where a step waits on the host for its device (``Capabilities.host_syncs``). Credit needs
no wait: it comes back on the device (the communication stream waits for the oldest send)."""


@dataclass
class ByteSchedulerConfig(SchedulerOptions):
    _target_: str = "gradsync.schedulers.priority.bytescheduler.ByteSchedulerSync"
    partition_size: int = option(PARTITION_SIZE, at_least=1, limit=MAX_ELEMENTS)
    """Elements per partition of the backward-ordered gradient (tensors are cut)."""
    credit: int = option(CREDIT, at_least=1, limit=MAX_ELEMENTS)
    """At most this many elements in flight; a larger partition is sent alone."""


@dataclass
class UsByteConfig(SchedulerOptions):
    _target_: str = "gradsync.schedulers.priority.usbyte.UsByteSync"
    min_partition_size: int = option(MIN_PARTITION_SIZE, at_least=1, limit=MAX_ELEMENTS)
    """The smallest partition (elements) the planner considers."""
    max_partition_size: int = option(MAX_PARTITION_SIZE, at_least=1, limit=MAX_ELEMENTS)
    """The largest partition; also the equal partitions sent while profiling."""
    credit: int = option(CREDIT, at_least=1, limit=MAX_ELEMENTS)
    """At most this many elements in flight; a larger partition is sent alone."""
    profile_steps: int = option(PROFILE_STEPS, at_least=1, limit=MAX_PROFILE_STEPS)
    """Steps measured (after a first warm-up step, updates applied in step) before planning."""
    alpha: float | None = option(None, limit=MAX_ALPHA_S)
    """Seconds per message of the link; null: timed on the job's process group at start-up."""
    beta: float | None = option(None, limit=MAX_BETA_S)
    """Seconds per byte of the link; null together with alpha."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda o: o.min_partition_size <= o.max_partition_size,
            lambda o: (
                "scheduler.min_partition_size must be >= 1 and <= scheduler.max_partition_size, "
                f"got {o.min_partition_size} and {o.max_partition_size}"
            ),
        ),
        Rule(
            lambda o: (o.alpha is None) == (o.beta is None),
            lambda o: "give both scheduler.alpha and scheduler.beta, or neither (to measure them)",
        ),
        Rule(
            lambda o: o.alpha is None or min(o.alpha, o.beta) >= 0,
            lambda o: "scheduler.alpha and scheduler.beta must be >= 0",
        ),
    )
