"""Ctrl-C (SIGINT) and SIGTERM (``timeout``, ``kill``, ``docker stop``, systemd) stop a command
the same way: the first one raises ``Stopped`` in the main thread, so every ``finally`` runs
(workers stopped, network namespaces torn down, summaries written); signals that arrive while
that cleanup runs are ignored, so a second Ctrl-C cannot cut it short. The worker processes
have their own handler (``gradsync.train.worker``); this one is the launching command's.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

HANDLED = (signal.SIGINT, signal.SIGTERM)


class Stopped(BaseException):
    """A stop signal arrived. A BaseException, like KeyboardInterrupt, so that handlers of
    ordinary errors (``except Exception``, Hydra's job runner) let it through."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.reported = False
        """The command already said in one line that it stopped."""
        super().__init__(self.reason)

    @property
    def status(self) -> str:
        """What a run's summary says: ``interrupted`` (Ctrl-C) or ``terminated``."""
        return "interrupted" if self.signum == signal.SIGINT else "terminated"

    @property
    def reason(self) -> str:
        if self.signum == signal.SIGINT:
            return "interrupted by the user"
        return f"terminated by {signal.Signals(self.signum).name}"

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process the signal ended."""
        return 128 + self.signum


def _raise_once(signum: int, frame: FrameType | None) -> None:
    for handled in HANDLED:
        signal.signal(handled, signal.SIG_IGN)  # cleanup runs to its end
    raise Stopped(signum)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within this block, the first SIGINT or SIGTERM raises ``Stopped`` (main thread only)."""
    previous = {signum: signal.getsignal(signum) for signum in HANDLED}
    for signum in HANDLED:
        signal.signal(signum, _raise_once)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
