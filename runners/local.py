"""``runner=local``: ``workers`` processes on this host, like a small torchrun.

Each worker is a fresh interpreter with RANK/WORLD_SIZE/LOCAL_RANK set and a file-based
rendezvous in a private temporary directory (no port to race for). Its output is forwarded line
by line with a ``[rank r]`` prefix (progress-bar redraws pass through as they come). The first
worker to fail stops the job: the others get SIGTERM, then SIGKILL after ``grace_period_s``, and
WorkerFailure names the rank and its error.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

from runners.base import Launch, WorkerFailure

log = logging.getLogger("gradsync.workers")
_POLL_S = 0.05


def _die_with_parent() -> None:
    """Linux: deliver SIGTERM to the worker if the launching process dies, so none is orphaned."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class _Forwarder(threading.Thread):
    """Copies one worker's output: whole lines to the log, carriage-return redraws to stderr."""

    def __init__(self, rank: int, stream: IO[bytes]) -> None:
        super().__init__(daemon=True, name=f"forward-rank{rank}")
        self.prefix = f"[rank {rank}] "
        self.stream = stream
        self._redrawing = False

    def run(self) -> None:
        pending = b""
        while chunk := os.read(self.stream.fileno(), 65536):
            pending += chunk
            while True:
                cut = min(
                    (i for i in (pending.find(b"\n"), pending.find(b"\r")) if i >= 0), default=-1
                )
                if cut < 0:
                    break
                segment, sep, pending = pending[:cut], pending[cut : cut + 1], pending[cut + 1 :]
                self._emit(segment.decode(errors="replace"), redraw=sep == b"\r")
        if pending:
            self._emit(pending.decode(errors="replace"), redraw=False)

    def _emit(self, text: str, *, redraw: bool) -> None:
        if redraw or (self._redrawing and not text):
            # Progress-bar redraws go to the terminal only, never into train.log.
            sys.stderr.write(("\r" + self.prefix + text) if text else ("\n" if not redraw else ""))
            sys.stderr.flush()
            self._redrawing = redraw
            return
        self._redrawing = False
        log.info(self.prefix + text)


class LocalRunner:
    def __init__(self, *, workers: int, grace_period_s: float = 3.0) -> None:
        self.workers = workers
        self.grace_period_s = grace_period_s

    def run(self, launch: Launch) -> None:
        scratch = Path(tempfile.mkdtemp(prefix="gradsync-"))
        procs: list[subprocess.Popen[bytes]] = []
        forwarders: list[_Forwarder] = []
        try:
            for rank in range(self.workers):
                proc = subprocess.Popen(
                    launch.argv,
                    env=self._worker_env(launch, rank, scratch),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # Ctrl-C reaches the launcher, which stops workers
                    preexec_fn=_die_with_parent,
                )
                procs.append(proc)
                assert proc.stdout is not None
                forwarder = _Forwarder(rank, proc.stdout)
                forwarder.start()
                forwarders.append(forwarder)
            first_failures = self._wait(procs)
        except BaseException:
            self._stop(procs)
            raise
        finally:
            for forwarder in forwarders:
                forwarder.join(timeout=5)
        try:
            if first_failures:
                raise self._failure(first_failures, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _worker_env(self, launch: Launch, rank: int, scratch: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update(launch.env)
        env.update(
            {
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(self.workers),
                "LOCAL_WORLD_SIZE": str(self.workers),
                "GRADSYNC_LAUNCHER": "local",
                "GRADSYNC_INIT_METHOD": f"file://{scratch / 'rendezvous'}",
                "GRADSYNC_ERROR_FILE": str(scratch / f"error-rank{rank}.json"),
                "GRADSYNC_PROGRESS": "1" if sys.stderr.isatty() else "0",
                "PYTHONUNBUFFERED": "1",
            }
        )
        return env

    def _wait(self, procs: list[subprocess.Popen[bytes]]) -> dict[int, int]:
        """Block until all workers exit ({}) or some fail: {rank: exit code} of the failures
        seen first, before the launcher stopped the others."""
        while True:
            codes = [p.poll() for p in procs]
            failed = {rank: code for rank, code in enumerate(codes) if code not in (None, 0)}
            if failed:
                self._stop(procs)
                return failed
            if all(code == 0 for code in codes):
                return {}
            time.sleep(_POLL_S)

    def _stop(self, procs: list[subprocess.Popen[bytes]]) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_period_s
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _failure(self, first_failures: dict[int, int], scratch: Path) -> WorkerFailure:
        # Once one rank dies its peers fail too (closed connections). A rank killed by a signal
        # the launcher did not send is the cause; otherwise the earliest error report is.
        signalled = {rank: code for rank, code in first_failures.items() if code < 0}
        if signalled:
            rank, code = min(signalled.items())
            return WorkerFailure(rank=rank, reason=f"killed by {signal.Signals(-code).name}")
        reports = []
        for path in scratch.glob("error-rank*.json"):
            try:
                reports.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, json.JSONDecodeError):
                continue
        if reports:
            first = min(reports, key=lambda r: r["time"])
            reason = f"{first['type']}: {first['message']}" if first["message"] else first["type"]
            return WorkerFailure(rank=first["rank"], reason=reason, detail=first["traceback"])
        rank, code = min(first_failures.items())
        return WorkerFailure(rank=rank, reason=f"exited with code {code} and left no error report")
