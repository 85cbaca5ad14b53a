"""``gradsync``: the command line. ``gradsync COMMAND [args]`` runs ``main(args)`` of the module
of that name in this package; each parses its arguments with ``command.CommandParser``."""

from __future__ import annotations

import importlib
import os
import sys

from gradsync import __version__
from gradsync.cli.command import fail
from gradsync.stop_signals import Stopped, stop_on_signals

COMMANDS = {
    "run": "train one configuration, or a sweep of them with -m",
    "sweep": "a sweep as text for a scheduler: --list OVERRIDES, --summarize SWEEP_DIR",
    "report": "tables and plots comparing run and sweep directories: report PATH...",
    "plan": "OMGS merge plans and modelled iteration times, without training: plan OVERRIDES",
    "simulate": "every compressor x scheduler predicted, and projected: simulate OVERRIDES",
}


def main(argv: list[str] | None = None) -> int:
    try:
        with stop_on_signals():
            return _main(sys.argv[1:] if argv is None else argv)
    except Stopped as stop:
        if not stop.reported:
            print(f"gradsync: error: {stop.reason}", file=sys.stderr)
        return stop.exit_code
    except BrokenPipeError:  # output piped into head, less, ...: stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _main(args: list[str]) -> int:
    if not args or args[0] in ("-h", "--help"):
        _print_help()
        return 0
    if args[0] == "--version":
        print(f"gradsync {__version__}")
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        fail(f"unknown command '{command}'; valid commands: {', '.join(COMMANDS)}")
    # Imported when chosen: a command pays only for its own imports.
    return importlib.import_module(f"gradsync.cli.{command}").main(rest)


def _print_help() -> None:

    print(f"gradsync {__version__}: communication-efficient data-parallel training experiments\n")
    print("usage: gradsync COMMAND [args]\n\ncommands:")
    for name, text in COMMANDS.items():
        print(f"  {name:<11} {text}")
    print()
    # Deferred for start-up: only the help lists the groups (it composes every option).
    from gradsync.cli.groups import groups_text

    print(groups_text())
    print("\nexamples:")
    print("  gradsync run")
    print("  gradsync run model=mlp trainer.workers=4 trainer.max_steps=50")
    print("  gradsync run -m trainer.workers=1,2 trainer.lr=0.1,0.05")
    print(
        "\nmore: gradsync run --help, gradsync run GROUP=OPTION --help (that option's keys),"
        "\n      gradsync run --cfg job (show the composed config)"
    )
