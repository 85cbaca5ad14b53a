"""What every ``gradsync`` command shares: one argument parser whose mistakes are one line,
``-h``/``--help`` printing the command's own text, and the exit codes of bad input."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from gradsync.config.checks import Check
from gradsync.jobs.compose import ConfigError
from gradsync.measure import MeasurementError

HELP_FLAGS = ("-h", "--help")


def checked(parse: Callable[[str], Any], check: Check, key: str) -> Callable[[str], Any]:
    """An argparse type: ``parse`` the text, then ``check`` the value (finite, in its range:
    ``config.checks``'s rules and words, as every option's), said as ``key``."""
    what = "a whole number" if parse is int else "a number"

    def convert(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        problem = check.failure(key, value)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return value

    return convert


class CommandParser(argparse.ArgumentParser):
    """argparse for ``gradsync COMMAND``. A mistake raises ConfigError, one line that names the
    command's --help, instead of argparse's usage text and exit; ``parse`` returns None after
    printing the help when ``-h``/``--help`` is anywhere in the arguments."""

    def __init__(
        self,
        command: str,
        *,
        help_text: Callable[[], str] | None = None,
        names_unknown_option: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(prog=f"gradsync {command}", **kwargs)
        self._help_text = help_text
        """The command's own help (its usage and docstring); argparse's own when None."""
        self._names_unknown_option = names_unknown_option
        """Say "unknown option X" for argparse's "unrecognized arguments: X ..." (False:
        argparse's words, which ``gradsync report`` has always printed)."""

    def parse(self, args: list[str]) -> argparse.Namespace | None:
        if any(arg in HELP_FLAGS for arg in args):
            self.print_help()
            return None
        # Intermixed: overrides and options may come in any order, as Hydra takes them.
        return self.parse_intermixed_args(args)

    def format_help(self) -> str:
        if self._help_text is None:
            return super().format_help()
        return self._help_text().rstrip() + "\n"

    def error(self, message: str) -> NoReturn:
        unrecognized = "unrecognized arguments: "
        if self._names_unknown_option and message.startswith(unrecognized):
            first = message[len(unrecognized) :].split()[0]
            message = (
                f"unknown option {first}"
                if first.startswith("-")
                else f"unexpected argument {first}"
            )
        raise ConfigError(f"{message}; see {self.prog} --help")


def docstring_help(usage: str, doc: str | None) -> Callable[[], str]:
    """Help text made of ``usage`` and the body of a command module's docstring."""
    body = (doc or "").split("\n\n", 1)[-1].rstrip()
    return lambda: f"{usage}\n{body}"


def fail(message: str, code: int = 2) -> NoReturn:
    """Stop the command with ``message`` as its one line on stderr."""
    print(f"gradsync: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def print_or_fail(make: Callable[[], str | None]) -> int:
    """Print what ``make`` returns (exit 0; None: nothing more to print), or its error in one
    line: exit 2 for bad input, 1 when a measurement on this host failed."""

    try:
        text = make()
        if text is not None:
            print(text)
    except (ConfigError, FileNotFoundError, KeyError) as exc:
        print(f"gradsync: error: {exc}", file=sys.stderr)
        return 2
    except MeasurementError as exc:
        print(f"gradsync: error: {exc}", file=sys.stderr)
        return 1
    return 0
