"""The config groups and their options, as ``gradsync --help`` and ``gradsync run --help`` list
them."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from gradsync.config.files import ROOT_CONFIG_FILE


def groups_text() -> str:
    from gradsync.config.discovery import group_options

    lines = ["config groups (group=option; * marks the default):"]
    defaults = OmegaConf.load(ROOT_CONFIG_FILE).defaults
    chosen = {k: v for d in defaults if isinstance(d, DictConfig | dict) for k, v in d.items()}
    for group, options in group_options().items():
        shown = [f"{o}*" if chosen.get(group) == o else o for o in options]
        lines.append(f"  {group:<11} {', '.join(shown) if shown else '(none yet)'}")
    return "\n".join(lines)
