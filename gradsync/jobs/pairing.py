"""Whether a scheduler takes a compressor as set: what the compressor's options declare
(``payloads_add_up``, ``keeps_own_residual``, ``needs_its_exchange_back``, ``compresses``)
against what the scheduler's registry entry declares (``allreduces``, ``parameter_server``,
``compresses_each_group_once``, ``dense_only``). One place for the rule, read by the config
checks and by the documentation's table of what each scheduler takes."""

from __future__ import annotations

from gradsync.compressors.options.base import CompressorConfig
from gradsync.schedulers.registry import SCHEDULERS, SchedulerSpec, allreducible_problem


def pairing_problem(
    scheduler: SchedulerSpec, compressor: CompressorConfig, name: str
) -> str | None:
    """Why ``scheduler`` cannot take ``compressor`` (chosen as ``compressor=name``), in one line
    that says what to use instead; None when it takes it."""
    memory = _memory_problem(scheduler, compressor, name)
    if memory is not None:
        return f"{memory}: use scheduler={', '.join(takers(compressor, name))}"
    return _refusal(scheduler, compressor, name)


def takers(compressor: CompressorConfig, name: str) -> list[str]:
    """Every scheduler that takes ``compressor`` as set."""
    return [
        other
        for other, spec in SCHEDULERS.items()
        if _memory_problem(spec, compressor, name) is None
        and _refusal(spec, compressor, name) is None
    ]


def _refusal(scheduler: SchedulerSpec, compressor: CompressorConfig, name: str) -> str | None:
    problem = allreducible_problem(scheduler.name, name, compressor.adds_up())
    if problem is None and scheduler.capabilities.dense_only and compressor.compresses:
        problem = (
            f"scheduler={scheduler.name} synchronizes dense layers; compressor={name} is not "
            "supported with it: use compressor=none, or a scheduler that takes compression"
        )
    return problem


def _memory_problem(
    scheduler: SchedulerSpec, compressor: CompressorConfig, name: str
) -> str | None:
    """Why ``scheduler`` cannot keep what the compressor's own memory needs, or None."""
    able = scheduler.capabilities
    if compressor.needs_its_exchange_back and able.parameter_server:
        return (
            f"compressor={name} needs what the workers exchanged back on each worker (its own "
            f"error feedback), but scheduler={scheduler.name} sums on its servers"
        )
    if compressor.keeps_own_residual and not able.compresses_each_group_once:
        return (
            f"compressor={name} keeps a memory per group, updated once a step, but "
            f"scheduler={scheduler.name} may compress a bucket twice in one step"
        )
    return None
