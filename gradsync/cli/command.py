"""What the commands that look at one composed job without training it (``gradsync plan``,
``gradsync simulate``) share: ``--help`` from their docstring, and one-line errors."""

from __future__ import annotations

import sys
from collections.abc import Callable

from gradsync.config.compose import ConfigError


def wants_help(args: list[str], usage: str, doc: str) -> bool:
    """Print the usage and the docstring's body when asked (``-h``/``--help``)."""
    if not any(a in ("-h", "--help") for a in args):
        return False
    print(usage)
    print(doc.split("\n\n", 1)[1].rstrip())
    return True


def print_or_fail(make: Callable[[], str]) -> int:
    """Print what ``make`` returns (exit 0), or its error in one line: exit 2 for bad input,
    1 when a measurement on this host failed."""
    from gradsync.projection.profile import MeasurementError

    try:
        print(make())
    except (ConfigError, FileNotFoundError, KeyError) as exc:
        print(f"gradsync: error: {exc}", file=sys.stderr)
        return 2
    except MeasurementError as exc:
        print(f"gradsync: error: {exc}", file=sys.stderr)
        return 1
    return 0
