"""The config groups and their options, as ``gradsync --help`` and ``gradsync run --help`` list
them, and an option's keys with their meanings (``gradsync run GROUP=OPTION --help``)."""

from __future__ import annotations

import shutil
import textwrap

from omegaconf import DictConfig, OmegaConf

from gradsync.config.files import ROOT_CONFIG_FILE
from gradsync.jobs.discovery import group_options
from gradsync.jobs.reference import KEYLESS_GROUP, option_doc


def _width() -> int:
    return min(shutil.get_terminal_size().columns, 100)


def groups_text() -> str:

    lines = ["config groups (group=option; * marks the default):"]
    defaults = OmegaConf.load(ROOT_CONFIG_FILE).defaults
    chosen = {k: v for d in defaults if isinstance(d, DictConfig | dict) for k, v in d.items()}
    for group, options in group_options().items():
        shown = [f"{o}*" if chosen.get(group) == o else o for o in options]
        listed = ", ".join(shown) if shown else "(none yet)"
        lines += textwrap.wrap(
            f"{group:<11} {listed}",
            _width(),
            initial_indent="  ",
            subsequent_indent=" " * 14,
            break_on_hyphens=False,
        )
    return "\n".join(lines)


def keys_help(group: str, option: str) -> str:
    """``group=option``'s summary, then each of its keys: name, default, and the first sentence
    of its meaning (``gradsync.jobs.reference``, the source of the docs' reference too)."""

    doc = option_doc(group, option)

    def wrapped(text: str, first: str, rest: str) -> list[str]:
        return textwrap.wrap(
            text,
            _width(),
            initial_indent=first,
            subsequent_indent=rest,
            break_on_hyphens=False,
            break_long_words=False,
        )

    lines = wrapped(f"{group}={option}: {doc.summary}", "", "  ")
    if group == KEYLESS_GROUP:
        lines += wrapped(" ".join(doc.settings), "  sets: ", " " * 8)
    for key in doc.keys:
        # A derived key's default is an interpolation: its meaning says what it follows.
        lines.append(f"  {key.key} (derived)" if key.derived else f"  {key.key}={key.default}")
        lines += wrapped(key.summary, " " * 6, " " * 6)
    return "\n".join(lines)
