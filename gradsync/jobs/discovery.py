"""Which config groups and options exist (for --help and the every-option tests)."""

from __future__ import annotations

from functools import cache

from hydra import initialize_config_module
from hydra.core.global_hydra import GlobalHydra

from gradsync import families
from gradsync.config.files import CONFIG_MODULE

_HIDDEN_GROUPS = {"hydra", "schema"}


def group_options() -> dict[str, list[str]]:
    """``{group: [option, ...]}`` for every user-facing config group, sorted."""
    return {group: list(options) for group, options in _listed()}


@cache
def _listed() -> tuple[tuple[str, tuple[str, ...]], ...]:
    # The config files do not change while a process runs: listed once (help asks twice).
    families.register()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        groups = [g for g in loader.list_groups("") if g not in _HIDDEN_GROUPS]
        return tuple((g, tuple(sorted(loader.get_group_options(g)))) for g in sorted(groups))
