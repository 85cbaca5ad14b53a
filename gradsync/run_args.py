"""What ``gradsync run`` takes besides overrides: ``-m``, and the Hydra flags it hands on to Hydra
(``--cfg``, ``--info``, ...). They are checked here, so a mistake is one line that says what to
do, not Hydra's usage text or a traceback.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import NoReturn

from gradsync.config.compose import ConfigError

INFO_CHOICES = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
# Hydra's flags that print instead of running (one composition each, so not with -m).
PRINTING = ("cfg", "info", "shell_completion")
# Hydra's flags after which Hydra alone reads the arguments: another config than gradsync's
# own, or shell completion (whose arguments are a query, not overrides).
HYDRA_ONLY = ("config_path", "config_name", "config_dir", "shell_completion")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, as for every gradsync command
        unknown = "unrecognized arguments: "
        if message.startswith(unknown):
            message = f"unknown option {message[len(unknown) :].split()[0]}"
        raise ConfigError(f"{message}; see gradsync run --help")


# Hydra's flags, passed to it as given (hydra/_internal/utils.py defines them): long form, short
# form, and how argparse takes the value.
HYDRA_FLAGS: tuple[tuple[str, str | None, dict[str, object]], ...] = (
    ("--cfg", "-c", {"choices": ("job", "hydra", "all")}),
    ("--resolve", None, {"action": "store_true"}),
    ("--package", "-p", {}),
    ("--info", "-i", {"nargs": "?", "const": "all", "choices": INFO_CHOICES}),
    ("--hydra-help", None, {"action": "store_true"}),
    ("--shell-completion", "-sc", {"action": "store_true"}),
    ("--config-path", "-cp", {}),
    ("--config-name", "-cn", {}),
    ("--config-dir", "-cd", {}),
    ("--experimental-rerun", None, {}),
)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gradsync run", add_help=False, allow_abbrev=False)
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("-m", "--multirun", action="store_true")
    for long, short, how in HYDRA_FLAGS:
        parser.add_argument(*(name for name in (short, long) if name), **how)  # type: ignore[arg-type]
    return parser


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class RunArgs:
    overrides: list[str]
    multirun: bool
    hydra_flags: list[str]
    """Hydra's own flags, checked, to hand on to Hydra."""
    prints_only: bool
    """Hydra prints something (a config, its help) and nothing runs."""
    hydra_only: bool
    """Hydra alone reads the arguments (-cp/-cn/-cd, --shell-completion): none are checked."""


def parse_run_args(args: list[str]) -> RunArgs:
    """``gradsync run``'s arguments; ConfigError (one line) when they cannot work."""
    parsed = _parser().parse_intermixed_args(args)
    printing = [f"--{name.replace('_', '-')}" for name in PRINTING if getattr(parsed, name)]
    if printing and parsed.multirun:
        raise ConfigError(
            f"{printing[0]} prints one composed job and cannot be combined with -m; drop -m "
            "(and give one value per key)"
        )
    flags: list[str] = []
    for long, _, _ in HYDRA_FLAGS:
        value = getattr(parsed, _dest(long))
        if value not in (None, False):
            flags += [long] if value is True else [long, str(value)]
    return RunArgs(
        overrides=list(parsed.overrides),
        multirun=parsed.multirun,
        hydra_flags=flags,
        prints_only=bool(printing) or parsed.hydra_help,
        hydra_only=any(getattr(parsed, name) for name in HYDRA_ONLY),
    )
