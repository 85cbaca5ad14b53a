"""One job with other compressor and scheduler choices, for commands that compare them
(``gradsync simulate``): the job is composed once, then each alternative takes its place.

The options the job sets for its own compressor and scheduler (``compressor.density=0.001`` on
the command line, or an experiment's) are carried over to every alternative whose options have
them, and left out of those that do not: the dense baseline (``compressor=none``) composes
whatever density the compressors under test are given. An option on the command line that no
alternative has is a typo, refused in one line. An option given several values
(``compressor.density=0.001,0.01``) is ``swept``: each value makes alternatives of its own.
Torch-free.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from gradsync.families import option_classes, option_schema
from gradsync.jobs.compose import ConfigError, check_config, compose_all, expand_sweep

SWAPPED = ("compressor", "scheduler")
"""The config groups an alternative chooses anew."""


@dataclass(frozen=True)
class Alternative:
    compressor: str
    scheduler: str
    settings: tuple[str, ...] = ()
    """Overrides of the scheduler's options that make this alternative (they win)."""

    def choice(self, group: str) -> str:
        return self.compressor if group == "compressor" else self.scheduler


@dataclass(frozen=True)
class Composed:
    alternative: Alternative
    cfg: DictConfig
    problem: ConfigError | None
    """Why the job refuses this alternative (None: it takes it)."""


def compose_alternatives(
    overrides: Sequence[str], alternatives: Sequence[Alternative]
) -> list[Composed]:
    """The job ``overrides`` compose, once for each alternative, each checked as a job started
    elsewhere would be (``check_config(launcher_here=False)``). ConfigError when the job does
    not compose, or gives a compressor or scheduler option that no alternative has."""
    job_overrides, group_overrides = _split(overrides)
    check_somebody_has([o for given in group_overrides.values() for o in given], alternatives)
    # Each group's node is composed once per option and settings, not once per pair.
    wanted = {
        (group, tuple(_node_job(group, a, group_overrides))): None
        for a in alternatives
        for group in SWAPPED
    }
    job, *nodes = compose_all([list(job_overrides), *(list(k[1]) for k in wanted)])
    node_of = {key: cfg[key[0]] for key, cfg in zip(wanted, nodes, strict=True)}
    carried = {group: _set_by_job(job, group) for group in SWAPPED}
    composed = []
    for alternative in alternatives:
        cfg = copy.deepcopy(job)
        for group in SWAPPED:
            given = {_key(o) for o in [*group_overrides[group], *alternative.settings]}
            node = node_of[(group, tuple(_node_job(group, alternative, group_overrides)))]
            kept = {
                key: value
                for key, value in carried[group].items()
                if key in _fields(group, alternative.choice(group)) and key not in given
            }
            cfg[group] = OmegaConf.merge(node, kept) if kept else copy.deepcopy(node)
        try:
            check_config(cfg, launcher_here=False)
            composed.append(Composed(alternative, cfg, None))
        except ConfigError as exc:
            composed.append(Composed(alternative, cfg, exc))
    return composed


def _split(overrides: Sequence[str]) -> tuple[list[str], dict[str, list[str]]]:
    """(the job's overrides, each swapped group's ``group.key=value`` ones)."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as exc:
        raise ConfigError(f"cannot parse overrides: {str(exc).splitlines()[0]}") from None
    job: list[str] = []
    groups: dict[str, list[str]] = {group: [] for group in SWAPPED}
    for override, text in zip(parsed, overrides, strict=True):
        group, dot, _ = override.key_or_group.partition(".")
        if dot and group in groups and override.package is None:
            groups[group].append(text)
        else:
            job.append(text)
    return job, groups


def _key(override: str) -> str:
    """``density`` of ``compressor.density=0.1`` (or ``+compressor.density=...``)."""
    return override.split("=", 1)[0].lstrip("+~").split(".", 1)[1]


def _fields(group: str, option: str) -> set[str]:
    schema = option_classes()[group].get(option)
    return {f.name for f in fields(schema) if not f.name.startswith("_")} if schema else set()


def check_somebody_has(overrides: Sequence[str], alternatives: Sequence[Alternative]) -> None:
    """ConfigError for a ``compressor.key=value`` (or scheduler) override that no alternative's
    option has: a typo."""
    for override in overrides:
        group = override.lstrip("+~").split(".", 1)[0]
        options = sorted({alternative.choice(group) for alternative in alternatives})
        if not any(_key(override) in _fields(group, option) for option in options):
            raise ConfigError(
                f"{override}: no {group} of this comparison ({', '.join(options)}) has an "
                f"option '{_key(override)}'; see `gradsync run --help` for each {group}'s options"
            )


def applies(override: str, alternative: Alternative) -> bool:
    """Whether ``override`` (``compressor.key=value`` or ``scheduler.key=value``) sets an
    option of ``alternative``'s compressor or scheduler."""
    group = override.lstrip("+~").split(".", 1)[0]
    return group in SWAPPED and _key(override) in _fields(group, alternative.choice(group))


def swept(overrides: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """(``overrides`` less the compressor and scheduler options given several values, each
    of those as its ``group.key=value`` per value): the options a comparison sweeps."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as exc:
        raise ConfigError(f"cannot parse overrides: {str(exc).splitlines()[0]}") from None
    fixed: list[str] = []
    axes: list[list[str]] = []
    for override, text in zip(parsed, overrides, strict=True):
        group = override.key_or_group.partition(".")[0]
        if group in SWAPPED and "." in override.key_or_group and override.is_sweep_override():
            axes.append([job[0] for job in expand_sweep([text])])
        else:
            fixed.append(text)
    return fixed, axes


def _node_job(
    group: str, alternative: Alternative, group_overrides: dict[str, list[str]]
) -> list[str]:
    """Overrides that compose the alternative's option of ``group`` with what the command and
    the alternative's settings give it (only that node of the composed job is taken)."""
    given = [
        override
        for override in [*group_overrides[group], *alternative.settings]
        if override.lstrip("+~").startswith(f"{group}.")
        and _key(override) in _fields(group, alternative.choice(group))
    ]
    return [f"{group}={alternative.choice(group)}", *given]


def _set_by_job(job: DictConfig, group: str) -> dict[str, Any]:
    """The options of the job's own ``group`` option whose values differ from that option's
    defaults (set on the command line or by an experiment)."""
    node = job[group]
    schema = option_schema(node, group)
    if schema is None:
        return {}
    defaults = OmegaConf.to_container(OmegaConf.structured(schema), resolve=False)
    values = OmegaConf.to_container(node, resolve=False)
    assert isinstance(defaults, dict) and isinstance(values, dict)
    return {
        str(key): value
        for key, value in values.items()
        if not str(key).startswith("_") and defaults.get(key) != value
    }
