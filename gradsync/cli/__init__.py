"""``gradsync``: the command line, one module per command."""

from gradsync.cli.run import main

__all__ = ["main"]
