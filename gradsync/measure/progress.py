"""What ``gradsync simulate`` measures on this host, said as it measures: one tqdm bar on stderr,
opened by the first measurement (a command that measures nothing shows none), labelled with
what runs now, one tick per measurement done. The bar is redrawn every ``REFRESH_S`` while a
measurement runs, so that a profile of minutes shows its time going by."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from tqdm import tqdm

BAR_FORMAT = "{desc} ({n_fmt} measured here, {elapsed})"
REFRESH_S = 1.0
LOG_REFRESH_S = 30.0
"""How often the bar is redrawn into a file or a pipe, which keeps every drawing."""


class Progress:
    """The bar of one command; ``count``: the measurements it said (0: none was taken)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._bar: tqdm | None = None
        self.count = 0

    @contextmanager
    def doing(self, what: str) -> Iterator[None]:
        """The bar says ``what`` while it runs, and counts it once done."""
        bar = self._opened(what)
        bar.set_description_str(what, refresh=True)
        self.count += 1
        done = threading.Event()
        every = REFRESH_S if _is_terminal(bar.fp) else LOG_REFRESH_S
        ticker = threading.Thread(target=_redraw, args=(bar, done, every), daemon=True)
        ticker.start()
        try:
            yield
        finally:
            done.set()
            ticker.join()
            bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _opened(self, what: str) -> tqdm:
        if self._bar is None:
            self._bar = tqdm(
                desc=what,
                bar_format=BAR_FORMAT,
                file=self._stream or sys.stderr,
                dynamic_ncols=True,
                disable=False,  # to a file or a pipe too: a minutes-long profile says so
                mininterval=REFRESH_S,
            )
        return self._bar


def _redraw(bar: tqdm, done: threading.Event, every: float) -> None:
    while not done.wait(every):
        bar.refresh()


def _is_terminal(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())
