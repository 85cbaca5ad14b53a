"""What ``gradsync run`` takes besides overrides: ``-m``, and the Hydra flags it hands on to Hydra
(``--cfg``, ``--info``, ...). They are checked here, so a mistake is one line that says what to
do, not Hydra's usage text or a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

from gradsync.cli.command import CommandParser
from gradsync.cli.groups import groups_text, keys_help
from gradsync.jobs.compose import ConfigError
from gradsync.jobs.discovery import group_options

INFO_CHOICES = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
# Hydra's flags that print instead of running (one composition each, so not with -m).
PRINTING = ("cfg", "info", "shell_completion")
# Hydra's flags after which Hydra alone reads the arguments: another config than gradsync's
# own, or shell completion (whose arguments are a query, not overrides).
HYDRA_ONLY = ("config_path", "config_name", "config_dir", "shell_completion")
# Hydra's own flags (``gradsync run --hydra-help`` lists them), passed to it as given: long
# form, short form, and how argparse takes the value.
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


def run_help(args: list[str] | None = None) -> str:
    """The help of ``gradsync run``; with ``group=option`` among ``args``, that option's keys
    (else the trainer's, which every job has), each with its meaning."""
    chosen = chosen_options(args or [])
    return "\n".join(
        [
            "usage: gradsync run [-m] [group=option ...] [key=value ...]\n",
            "Train one configuration; with -m, every combination of comma-separated values.",
            "Outputs go to hydra.run.dir (default outputs/DATE/TIME) or, with -m, to",
            "hydra.sweep.dir/N (default multirun/DATE/TIME/N) plus a sweep summary.csv.\n",
            groups_text(),
            "",
            *[keys_help(group, option) for group, option in chosen or [("trainer", "default")]],
            "\nan option's keys:              gradsync run GROUP=OPTION --help",
            "show every key and its value: gradsync run --cfg job [overrides]",
            "Hydra's own options:           gradsync run --hydra-help",
        ]
    )


def chosen_options(args: list[str]) -> list[tuple[str, str]]:
    """The ``group=option`` choices among ``args``, each of a comma-separated list (ConfigError,
    one line, for an option that does not exist or a sweep function)."""

    groups = group_options()
    chosen: list[tuple[str, str]] = []
    for arg in args:
        group, equals, value = arg.partition("=")
        if arg.startswith("-") or not equals or group not in groups:
            continue
        if "(" in value:
            raise ConfigError(
                f"--help shows options given by name, not {value}: list them, "
                f"{group}={','.join(groups[group][:2])}"
            )
        for option in value.split(","):
            if option not in groups[group]:
                raise ConfigError(
                    f"unknown {group} '{option}'; valid options: {', '.join(groups[group])}"
                )
            chosen.append((group, option))
    return chosen


def _parser(args: list[str]) -> CommandParser:
    # No abbreviations: Hydra's flags are passed on exactly as Hydra spells them.
    parser = CommandParser("run", help_text=lambda: run_help(args), allow_abbrev=False)
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


def parse_run_args(args: list[str]) -> RunArgs | None:
    """``gradsync run``'s arguments; None when the help was asked for (and printed);
    ConfigError (one line) when they cannot work."""
    parsed = _parser(args).parse(args)
    if parsed is None:
        return None
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
