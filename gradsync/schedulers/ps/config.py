"""Options of the parameter-server schedulers (ps_bsp, asp, ssp, osp), each default defined
here once. Torch-free: the command line checks them before importing torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gradsync.algorithms.osp_budget import UMAX_FORMULAS
from gradsync.cluster.rates import rate_problem
from gradsync.config.checks import Rule, option
from gradsync.schedulers.options import SchedulerOptions
from gradsync.schedulers.staleness_options import (
    CORRECTIONS,
    PREDICTION,
    StalenessCorrectionOptions,
)

UMAX_FORMULA = "corrected"
MAX_STALENESS = 10**6  # steps a worker may run ahead: more is asp's "no bound"
MAX_UNIMPORTANT = 0.8  # the paper's 80% cap on the unimportant layers' share of the model
# Measured on the OSP recipe at 20 Mbit/s (BENCHMARKS.md, "Staleness corrections for ASP and
# SSP"): the only one that closes the gap to BSP; none is the papers' updates.
STALE_STALENESS_CORRECTION = PREDICTION
HOST_STAGING = "ps.host_staging"
HOST_SYNCS = (
    (
        HOST_STAGING,
        "the servers hold the model in host memory and talk gloo: a GPU worker's push is "
        "copied to the host",
    ),
)
"""Where a worker waits on the host for its device (``Capabilities.host_syncs``)."""


@dataclass
class ParameterServerConfig(SchedulerOptions):
    _target_: str = "gradsync.schedulers.ps.worker.PsSync"
    server: str = "gradsync.schedulers.ps.server.serve_bulk_synchronous"
    """The servers' loop (fixed by the scheduler)."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda o: o.server == type(o).server,
            lambda o: (
                f"scheduler.server is fixed by the scheduler ({type(o).server}); choose "
                "another scheduler instead"
            ),
        ),
    )


@dataclass
class PsBspConfig(ParameterServerConfig):
    """Every step the servers average all workers' gradients, then everyone pulls."""


@dataclass
class StaleConfig(ParameterServerConfig, StalenessCorrectionOptions):
    """Each gradient applied as it arrives: workers out of lockstep, their servers' loop, and
    what the servers do about a gradient's staleness (none: as the papers apply it)."""

    _target_: str = "gradsync.schedulers.ps.worker.StalePsSync"
    server: str = "gradsync.schedulers.ps.server.serve_stale"
    staleness_correction: str = option(STALE_STALENESS_CORRECTION, choices=CORRECTIONS)
    """predict (the default, by measurement), none (gradients as the papers apply them),
    momentum, dc or lr (see staleness_options.py)."""
    staleness: int | None = option(None, at_least=0, limit=MAX_STALENESS, null_means="no bound")
    """How many steps a worker may run ahead of the slowest (null: no bound)."""


@dataclass
class AspConfig(StaleConfig):
    """No bound on staleness: a worker never waits for the others."""


@dataclass
class SspConfig(StaleConfig):
    staleness: int = option(3, at_least=0, limit=MAX_STALENESS)
    """A worker that has pushed c gradients waits until the slowest has pushed c − staleness."""


@dataclass
class OspConfig(ParameterServerConfig):
    _target_: str = "gradsync.schedulers.ps.osp.OspSync"
    server: str = "gradsync.schedulers.ps.osp_server.serve_osp"
    max_unimportant: float = option(MAX_UNIMPORTANT, at_least=0, at_most=1)
    """Cap on the unimportant layers' bytes, as a fraction of the model (the paper's 80%);
    0 makes OSP exactly ps_bsp."""
    umax_formula: str = option(UMAX_FORMULA, choices=UMAX_FORMULAS)
    """U_max = b·T_c/(N·(1+lr)) (corrected) or b(1+lr)·T_c/N (paper); equal without loss."""
    loss_rate: float = option(0.0, at_least=0, below=1)
    """The link's packet-loss rate in U_max."""
    bandwidth: str | None = option(
        None, problem=lambda rate: rate_problem(rate, "scheduler.bandwidth")
    )
    """The link rate in U_max, as tc writes it; null: the rate measured at the start of the
    run (runner=netem probes it), else 1gbit."""
    budget: float | None = option(None, at_least=0, at_most=1)
    """A fixed unimportant budget (fraction of the model) for every iteration instead of the
    loss-driven schedule; for experiments and tests."""
