"""Ctrl-C (SIGINT) and SIGTERM (``timeout``, ``kill``, ``docker stop``, systemd) stop a command
the same way: the first one raises ``Stopped`` in the main thread, so every ``finally`` runs
(workers stopped, network namespaces torn down, summaries written); signals that arrive while
that cleanup runs are ignored, so a second Ctrl-C cannot cut it short. A worker process
(``gradsync.train.worker``) stops the same way for its whole life, whoever sent the signal; a
launcher that sees a worker stopped by a signal it did not send stops the job as if the signal
had reached it (``Stopped`` naming the rank).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM)


class Stopped(BaseException):
    """A stop signal arrived. A BaseException, like KeyboardInterrupt, so that handlers of
    ordinary errors (``except Exception``, Hydra's job runner) let it through."""

    def __init__(self, signum: int, *, rank: int | None = None) -> None:
        self.signum = signum
        self.rank = rank
        """The worker the signal reached, when it reached a worker and not this command."""
        self.reported = False
        """The command already said in one line that it stopped."""
        super().__init__(self.reason)

    @property
    def status(self) -> str:
        """What a run's summary says: ``interrupted`` (Ctrl-C to this command) or
        ``terminated`` (SIGTERM to it, or either signal sent to one of its workers from
        elsewhere: the job was stopped from outside, not by the user at its terminal)."""
        return "interrupted" if self.signum == signal.SIGINT and self.rank is None else "terminated"

    @property
    def reason(self) -> str:
        name = signal.Signals(self.signum).name
        if self.rank is not None:
            return f"rank {self.rank} {self.status} by {name}"
        if self.signum == signal.SIGINT:
            return "interrupted by the user"
        return f"terminated by {name}"

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process the signal ended; a worker's
        signal ends the command as ``terminated`` (143), the code its summary records."""
        return 128 + (signal.SIGTERM if self.rank is not None else self.signum)


def stopping(signum: int, *, rank: int | None = None) -> Stopped:
    """``Stopped`` for ``signum``, with further stop signals ignored from now on (main thread),
    so the cleanup that follows runs to its end."""
    if threading.current_thread() is threading.main_thread():
        for handled in HANDLED:
            signal.signal(handled, signal.SIG_IGN)
    return Stopped(signum, rank=rank)


def _raise_once(signum: int, frame: FrameType | None) -> None:
    raise stopping(signum)


def raise_on_signals() -> None:
    """From now on, the first SIGINT or SIGTERM raises ``Stopped`` (main thread only): for a
    process that stops this way for its whole life, a worker."""
    for signum in HANDLED:
        signal.signal(signum, _raise_once)


_DEFAULTS: dict[int, Callable[[int, FrameType | None], Any] | int] = {
    signal.SIGINT: signal.default_int_handler,
    signal.SIGTERM: signal.SIG_DFL,
}


def _defaults_in_child() -> None:
    """A forked child (a data loader process) stops as Python's default would have it (its
    code catches KeyboardInterrupt), not with a ``Stopped`` nobody there expects."""
    for signum, default in _DEFAULTS.items():
        if signal.getsignal(signum) is _raise_once:
            signal.signal(signum, default)


os.register_at_fork(after_in_child=_defaults_in_child)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within this block, the first SIGINT or SIGTERM raises ``Stopped`` (main thread only)."""
    previous = {signum: signal.getsignal(signum) for signum in HANDLED}
    raise_on_signals()
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
