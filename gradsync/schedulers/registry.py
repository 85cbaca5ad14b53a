"""Every ``scheduler=`` option, once: its name, typed options, engine, capabilities and cost model.

A scheduler is one package under ``gradsync/schedulers/`` plus one entry here. Every check and
table that depends on the scheduler (the config checks, ``gradsync simulate`` and ``plan``, the
parameter servers' start-up) reads its ``SchedulerSpec``; nothing else lists scheduler names.
The options' defaults live in each family's ``config.py`` and nowhere else. This module is
torch-free: the command line reads it before any worker starts.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from omegaconf import DictConfig, OmegaConf

from gradsync.compressors.registry import allreducible_choices
from gradsync.schedulers.allreduce.config import AllreduceConfig
from gradsync.schedulers.deft.config import DeftSchedulerConfig
from gradsync.schedulers.pipelined.config import (
    LagsSchedulerConfig,
    MgsSchedulerConfig,
    OmgsSchedulerConfig,
    WfbpSchedulerConfig,
)
from gradsync.schedulers.priority.config import HOST_SYNCS as PRIORITY_HOST_SYNCS
from gradsync.schedulers.priority.config import ByteSchedulerConfig, UsByteConfig
from gradsync.schedulers.ps.config import HOST_SYNCS as SERVER_HOST_SYNCS
from gradsync.schedulers.ps.config import AspConfig, OspConfig, PsBspConfig, SspConfig

if TYPE_CHECKING:
    from gradsync.projection.estimates import Estimate, Job

CostModel = Callable[["Job"], "Estimate"]


@dataclass(frozen=True)
class Capabilities:
    """What a scheduler needs of the rest of the job, and how it behaves, as checks and cost
    models need to know it."""

    allreduces: bool = False
    """It sums payloads on the wire, so the compressor's payloads must add up."""
    parameter_server: bool = False
    """It runs ``trainer.servers`` server processes besides the workers."""
    dense_only: bool = False
    """It takes no compression (``compressor=none`` only)."""
    servers: int | None = None
    """The number of servers it runs with (None: any ``trainer.servers``)."""
    devices: tuple[str, ...] = ("cpu", "cuda")
    resumable: bool = True
    """A run can resume from its checkpoints."""
    overlaps_backward: bool = False
    """It exchanges while backward runs (from a communication thread)."""
    concurrent_exchanges: bool = False
    """Several of its exchanges may be in flight at once: its communication thread starts them
    and finishes them later (every group's all-reduce of the exchange engine, partitions under
    a credit, two links). Otherwise no collective of its runs beside another."""
    lockstep: bool = True
    """Every worker takes part in every step (False: asynchronous parameter servers)."""
    fits_in_place: bool = False
    """With no cost model given, it fits its own to the job's first steps (``gradsync plan``
    replays them to predict the plan)."""
    decisions: tuple[str, ...] = ()
    """What it decides from measurements inside the job, as it logs them (``sched/<name>``)."""
    equals_allreduce: bool = False
    """With ``compressor=none`` it trains exactly as ``scheduler=allreduce`` does (the same
    mean gradient, applied once per step), whatever it overlaps."""
    compresses_each_group_once: bool = True
    """Each step compresses each of its groups once, as whole tensors; False: a group may be
    compressed twice in one step and cut tensors (DeFT's buckets of the gradient in flight and
    of the new one), which a compressor with per-group memory of its own cannot follow."""
    loss_scaling: bool = False
    """It takes ``trainer.precision=fp16``: every worker applies each step's gradient in that
    step (the exchange engine's ``step``), so an overflowing step is skipped on all of them at
    once and its error feedback undone. Deferred updates (applied in the next forward pass, or
    steps later with other steps' gradients summed in) and servers that step cannot."""
    host_syncs: tuple[tuple[str, str], ...] = ()
    """(point, why) of each place where a steady step of it waits on the host for the device
    because the method decides something there (``gradsync/comm/host_sync.py``); profiled
    steps may wait anywhere. Every other wait is a defect (``trainer.check_host_syncs_from``)."""


@dataclass(frozen=True)
class SchedulerSpec:
    name: str
    summary: str
    """One line for ``--help`` and the docs."""
    config: type
    """The typed options (a dataclass whose ``_target_`` is the engine factory)."""
    capabilities: Capabilities
    cost_model: str
    """``module:function`` of its iteration-time model for ``gradsync simulate`` and ``plan``
    (resolved on use: cost models import torch)."""
    simulate_variants: tuple[tuple[str, ...], ...] = ((),)
    """Option settings that each get a row of their own in ``gradsync simulate``."""
    headline: tuple[tuple[str, ...], ...] = ()
    """The papers' headline combinations with this scheduler, the lines of ``gradsync
    simulate --plot``: each a compressor option, then the settings of one of its
    ``simulate_variants``."""
    baseline: bool = False
    """Dense DDP, with ``compressor=none``: what ``gradsync simulate`` measures every speed-up
    against (exactly one entry)."""
    plan_reader: str | None = None
    """``module:function`` that reads, from a run's directory, what the scheduler planned from
    inside that job, for its cost model to follow (``Job.logged_plan``); None: it leaves
    nothing of the kind."""

    def estimate(self, job: Job) -> Estimate:
        model: CostModel = _resolved(self.cost_model)
        return model(job)

    def logged_plan(self, run_dir: Path) -> object | None:
        """What the scheduler planned from in the run at ``run_dir`` (``plan_reader``); None
        when it leaves no plan, or the run made none."""
        return None if self.plan_reader is None else _resolved(self.plan_reader)(run_dir)


def _resolved(name: str) -> Callable[..., Any]:
    """The function ``module:function`` names (imported on use: cost models import torch)."""
    module, _, function = name.partition(":")
    return cast(Callable[..., Any], getattr(importlib.import_module(module), function))


def _registry(specs: Iterable[SchedulerSpec]) -> dict[str, SchedulerSpec]:
    registry: dict[str, SchedulerSpec] = {}
    for spec in specs:
        if spec.name in registry:
            raise RuntimeError(f"scheduler {spec.name} is registered twice")
        for compressor, *settings in spec.headline:
            if tuple(settings) not in spec.simulate_variants:
                raise RuntimeError(
                    f"scheduler {spec.name}'s headline {compressor} {' '.join(settings)} is not "
                    "one of its simulate_variants"
                )
        registry[spec.name] = spec
    baselines = [spec.name for spec in registry.values() if spec.baseline]
    if len(baselines) != 1:
        raise RuntimeError(f"exactly one scheduler must be the baseline, got {baselines}")
    return registry


# The exchange engine starts each group's all-reduce and goes on: several may be in flight.
_PIPELINED = Capabilities(
    overlaps_backward=True, concurrent_exchanges=True, equals_allreduce=True, loss_scaling=True
)
_PRIORITY = Capabilities(
    allreduces=True,
    overlaps_backward=True,
    concurrent_exchanges=True,
    equals_allreduce=True,
    host_syncs=PRIORITY_HOST_SYNCS,
)
_ASYNCHRONOUS_SERVERS = Capabilities(
    parameter_server=True, resumable=False, lockstep=False, host_syncs=SERVER_HOST_SYNCS
)

SCHEDULERS: Mapping[str, SchedulerSpec] = _registry(
    [
        SchedulerSpec(
            name="allreduce",
            summary="one exchange of the whole flattened gradient after backward",
            config=AllreduceConfig,
            capabilities=Capabilities(
                concurrent_exchanges=True, equals_allreduce=True, loss_scaling=True
            ),
            cost_model="gradsync.schedulers.allreduce.cost:iteration",
            headline=(("none",), ("topk",), ("deft",), ("cltk",), ("terngrad",)),
        ),
        SchedulerSpec(
            name="wfbp",
            summary="DDP's wait-free backpropagation: buckets all-reduced during backward",
            config=WfbpSchedulerConfig,
            capabilities=Capabilities(
                allreduces=True,
                overlaps_backward=True,
                concurrent_exchanges=True,
                equals_allreduce=True,
                loss_scaling=True,
            ),
            cost_model="gradsync.schedulers.pipelined.cost:wfbp",
            baseline=True,
        ),
        SchedulerSpec(
            name="lags",
            summary="LAGS-SGD: every tensor compressed and exchanged as soon as it is ready",
            config=LagsSchedulerConfig,
            capabilities=_PIPELINED,
            cost_model="gradsync.schedulers.pipelined.cost:lags",
        ),
        SchedulerSpec(
            name="mgs",
            summary="MGS-SGD: tensors merged into groups of at least `threshold` elements",
            config=MgsSchedulerConfig,
            capabilities=_PIPELINED,
            cost_model="gradsync.schedulers.pipelined.cost:mgs",
        ),
        SchedulerSpec(
            name="omgs",
            summary="OMGS-SGD: merge groups planned from measured times and fitted cost models",
            config=OmgsSchedulerConfig,
            capabilities=Capabilities(
                overlaps_backward=True,
                concurrent_exchanges=True,
                fits_in_place=True,
                decisions=("gamma", "delta", "alpha", "beta"),
                equals_allreduce=True,
                loss_scaling=True,
            ),
            cost_model="gradsync.schedulers.pipelined.cost:omgs",
            simulate_variants=(("scheduler.rule=paper",), ("scheduler.rule=optimal",)),
            headline=(("topk", "scheduler.rule=paper"),),
        ),
        SchedulerSpec(
            name="bytescheduler",
            summary="ByteScheduler: partitions all-reduced input side first under a credit",
            config=ByteSchedulerConfig,
            capabilities=_PRIORITY,
            cost_model="gradsync.schedulers.priority.cost:bytescheduler",
            headline=(("none",),),
        ),
        SchedulerSpec(
            name="usbyte",
            summary="US-Byte (approximate): ByteScheduler with unequal, planned partitions",
            config=UsByteConfig,
            capabilities=_PRIORITY,
            cost_model="gradsync.schedulers.priority.cost:usbyte",
        ),
        SchedulerSpec(
            name="deft",
            summary="DeFT: buckets sent in knapsack-chosen windows, delayed updates",
            config=DeftSchedulerConfig,
            capabilities=Capabilities(
                allreduces=True,
                overlaps_backward=True,
                concurrent_exchanges=True,
                decisions=("capacity_scale", "mu"),
                compresses_each_group_once=False,
            ),
            cost_model="gradsync.schedulers.deft.cost:iteration",
            simulate_variants=((), ("scheduler.links=2",)),
            headline=(("none", "scheduler.links=2"),),
            plan_reader="gradsync.schedulers.deft.cost:logged_plan",
        ),
        SchedulerSpec(
            name="ps_bsp",
            summary="parameter server, bulk synchronous",
            config=PsBspConfig,
            capabilities=Capabilities(
                parameter_server=True,
                resumable=False,
                equals_allreduce=True,
                host_syncs=SERVER_HOST_SYNCS,
            ),
            cost_model="gradsync.schedulers.ps.cost:bulk_synchronous",
            headline=(("none",),),
        ),
        SchedulerSpec(
            name="asp",
            summary="parameter server, asynchronous: each gradient applied as it arrives",
            config=AspConfig,
            capabilities=_ASYNCHRONOUS_SERVERS,
            cost_model="gradsync.schedulers.ps.cost:asynchronous",
        ),
        SchedulerSpec(
            name="ssp",
            summary="parameter server, stale synchronous: at most `staleness` steps ahead",
            config=SspConfig,
            capabilities=_ASYNCHRONOUS_SERVERS,
            cost_model="gradsync.schedulers.ps.cost:asynchronous",
        ),
        SchedulerSpec(
            name="osp",
            summary="OSP: important layers synchronized at once, the others in the background",
            config=OspConfig,
            capabilities=Capabilities(
                parameter_server=True,
                resumable=False,
                dense_only=True,
                servers=1,
                host_syncs=SERVER_HOST_SYNCS,
            ),
            cost_model="gradsync.schedulers.ps.cost:overlapped_synchronous",
            headline=(("none",),),
        ),
    ]
)


def peer_schedulers() -> list[str]:
    """The schedulers whose workers exchange among themselves in every step, with no servers
    (what a one-process benchmark or test can run with the exchange engine alone)."""
    return [
        name
        for name, spec in SCHEDULERS.items()
        if spec.capabilities.lockstep and not spec.capabilities.parameter_server
    ]


def spec_named(name: str) -> SchedulerSpec:
    try:
        return SCHEDULERS[name]
    except KeyError:
        raise ValueError(f"unknown scheduler {name!r}; valid: {', '.join(SCHEDULERS)}") from None


def baseline_spec() -> SchedulerSpec:
    """Dense DDP's scheduler, which every speed-up is measured against (its entry's
    ``baseline``)."""
    (spec,) = (spec for spec in SCHEDULERS.values() if spec.baseline)
    return spec


def spec_of(options: Any) -> SchedulerSpec:
    """The spec whose typed options ``options`` are (a composed ``scheduler`` node, or its
    dataclass instance)."""
    kind = OmegaConf.get_type(options) if isinstance(options, DictConfig) else type(options)
    for spec in SCHEDULERS.values():
        if spec.config is kind:
            return spec
    raise ValueError(f"no scheduler has the options {kind!r}")


def specs_like(options: Any) -> list[SchedulerSpec]:
    """The specs ``options`` may be: its own when it is typed; for a node read back from YAML
    (which has lost its type), every spec that builds the same engine (``_target_``)."""
    if not isinstance(options, DictConfig) or OmegaConf.get_type(options) is not dict:
        return [spec_of(options)]
    target = options.get("_target_")
    return [s for s in SCHEDULERS.values() if getattr(s.config, "_target_", None) == target]


def runs_servers(scheduler: Any) -> bool:
    """Whether the scheduler (a composed ``scheduler`` node, also one read back from YAML)
    runs parameter servers besides the workers."""
    return any(spec.capabilities.parameter_server for spec in specs_like(scheduler))


def _cannot_sum(scheduler: str, adds_up: bool) -> bool:
    """The one rule: a scheduler that sums payloads on the wire needs a compressor whose
    payloads add up (which can depend on its settings: ``exchange``)."""
    spec = SCHEDULERS.get(scheduler)  # an engine built directly may have no entry: it sums
    sums = spec is None or spec.capabilities.allreduces
    return sums and not adds_up


def allreducible_problem(scheduler: str, compressor_name: str, adds_up: bool) -> str | None:
    """Why a compressor whose payloads add up or not (``adds_up``) cannot go with
    ``scheduler`` (``_cannot_sum``), as the config checks say it; else None."""
    if not _cannot_sum(scheduler, adds_up):
        return None
    return (
        f"scheduler={scheduler} all-reduces, but compressor={compressor_name} all-gathers its "
        f"payloads; use {allreducible_choices()}"
    )
