"""The config groups and their options, as ``gradsync --help`` and ``gradsync run --help`` list
them, and an option's keys with their meanings (``gradsync run GROUP=OPTION --help``)."""

from __future__ import annotations

import shutil
import textwrap

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


def keys_help(group: str, option: str) -> str:
    """``group=option``'s summary, then each of its keys: name, default, and the first sentence
    of its meaning (``gradsync.config.reference``, the source of the docs' reference too)."""
    from gradsync.config.reference import option_doc

    doc = option_doc(group, option)
    width = min(shutil.get_terminal_size().columns, 100)
    wrap = textwrap.TextWrapper(width, break_on_hyphens=False, break_long_words=False)
    wrap.subsequent_indent = "  "
    lines = wrap.wrap(f"{group}={option}: {doc.summary}")
    wrap.initial_indent = wrap.subsequent_indent = "      "
    if group == "experiment":
        lines.append("  (a recipe: it sets other groups' options and keys; see --cfg job)")
    for key in doc.keys:
        lines.append(f"  {key.key}={key.default}")
        lines += wrap.wrap(key.summary)
    return "\n".join(lines)
