"""``runner=local``: ``workers`` processes on this host, like a small torchrun.

Each worker is a fresh interpreter with RANK/WORLD_SIZE/LOCAL_RANK and MASTER_ADDR/PORT set
(rank 0 hosts the TCP store on a free loopback port, as torchrun does). Its output is forwarded line
by line with a ``[rank r]`` prefix (progress-bar redraws pass through as they come). The first
worker to fail stops the job: the others get SIGTERM, then SIGKILL after ``grace_period_s``, and
WorkerFailure names the rank and its error. A worker that SIGINT or SIGTERM reached from
elsewhere stops the job the same way, which then ends as if the signal had reached this process.
"""

from __future__ import annotations

import codecs
import ctypes
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import IO

from gradsync.cluster.ports import free_port
from gradsync.launch import Launch, Loopback, Placement, WorkerFailure
from gradsync.launch.options import LocalRunnerConfig
from gradsync.stop_signals import Stopped, stopping
from runners.reports import error_file, read_error_reports, root_cause, stopped_rank

log = logging.getLogger("gradsync.workers")
_POLL_S = 0.05
_LINE_ENDS = re.compile(r"[\r\n]")


def _die_with_parent() -> None:
    """Linux: deliver SIGTERM to the worker if the launching process dies, so none is orphaned."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class _Terminal:
    """The console shared by all forwarders: log lines scroll, a progress bar stays at the bottom.

    Lines go through logging (console and train.log); bar redraws go to the terminal only.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bar = ""

    def line(self, text: str) -> None:
        with self._lock:
            if self._bar:
                sys.stderr.write("\r\x1b[2K")
            log.info(text)
            if self._bar:
                sys.stderr.write(self._bar)
                sys.stderr.flush()

    def bar(self, text: str) -> None:
        with self._lock:
            self._bar = text
            sys.stderr.write("\r\x1b[2K" + text)
            sys.stderr.flush()

    def bar_done(self) -> None:
        with self._lock:
            if self._bar:
                sys.stderr.write("\n")
                sys.stderr.flush()
            self._bar = ""


class _Forwarder(threading.Thread):
    """Copies one output stream of one worker to the terminal, prefixed with its rank.

    Text after a carriage return is a progress-bar redraw (tqdm writes ``\\r`` + bar); a newline
    ends the bar. Everything else is forwarded line by line.
    """

    def __init__(self, rank: int, stream: IO[bytes], terminal: _Terminal) -> None:
        super().__init__(daemon=True, name=f"forward-rank{rank}")
        self.prefix = f"[rank {rank}] "
        self.stream = stream
        self.terminal = terminal

    def run(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending, in_bar = "", False
        while chunk := os.read(self.stream.fileno(), 65536):
            pending += decoder.decode(chunk)
            while (match := _LINE_ENDS.search(pending)) is not None:
                segment, end = pending[: match.start()], match.group()
                pending = pending[match.end() :]
                if in_bar:
                    if segment:
                        self.terminal.bar(self.prefix + segment)
                    if end == "\n":
                        self.terminal.bar_done()
                        in_bar = False
                elif segment or end == "\n":
                    self.terminal.line(self.prefix + segment)
                in_bar = in_bar or end == "\r"
            if in_bar and pending:  # show the bar now, not when its next redraw arrives
                self.terminal.bar(self.prefix + pending)
        if pending and not in_bar:
            self.terminal.line(self.prefix + pending)
        if in_bar:
            self.terminal.bar_done()


class LocalRunner:
    reports_outcome = True
    restarted = False  # nothing restarts a local job behind the user's back

    def __init__(
        self, *, workers: int, grace_period_s: float = LocalRunnerConfig.grace_period_s
    ) -> None:
        self.workers = workers
        self.hosts = workers
        """Places ranks run in (``_host``)."""
        self.grace_period_s = grace_period_s

    def run(self, launch: Launch) -> None:
        # Whatever ended the job, a signal too, the scratch and then the placement are removed.
        with self.placement(self.hosts) as placement:
            scratch = Path(tempfile.mkdtemp(prefix="gradsync-"))
            try:
                self._run_workers(launch, placement, scratch)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)

    def _run_workers(self, launch: Launch, placement: Placement, scratch: Path) -> None:
        procs: list[subprocess.Popen[bytes]] = []
        forwarders: list[_Forwarder] = []
        terminal = _Terminal()
        port = free_port()
        try:
            for rank in range(self.workers):
                proc = subprocess.Popen(
                    placement.command(self._host(rank), launch.argv),
                    env=self._worker_env(launch, rank, scratch, port, placement),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,  # separate: bar redraws never split a log line
                    start_new_session=True,  # Ctrl-C reaches the launcher, which stops workers
                    preexec_fn=_die_with_parent,
                )
                procs.append(proc)
                for stream in (proc.stdout, proc.stderr):
                    assert stream is not None
                    forwarder = _Forwarder(rank, stream, terminal)
                    forwarder.start()
                    forwarders.append(forwarder)
            first_failures = self._wait(procs)
        except BaseException:
            self._stop(procs)
            raise
        finally:
            for forwarder in forwarders:
                forwarder.join(timeout=5)
        if first_failures:
            raise self._failure(first_failures, scratch)

    def _worker_env(
        self, launch: Launch, rank: int, scratch: Path, port: int, placement: Placement
    ) -> dict[str, str]:
        env = dict(os.environ)
        env.update(launch.env)
        env.update(
            {
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(self.workers),
                "LOCAL_WORLD_SIZE": str(self.workers),
                "GRADSYNC_LAUNCHER": "local",
                "MASTER_PORT": str(port),
                "GRADSYNC_ERROR_FILE": str(error_file(scratch, rank)),
                "GRADSYNC_PROGRESS": "1" if sys.stderr.isatty() else "0",
                "PYTHONUNBUFFERED": "1",
                **placement.env(self._host(rank)),
            }
        )
        return env

    # ---- where the workers run: overridden by runners that place them elsewhere ------------
    def placement(self, ranks: int) -> AbstractContextManager[Placement]:
        """``ranks`` plain processes here, reaching rank 0 over loopback."""
        return nullcontext(Loopback())

    def _host(self, rank: int) -> int:
        """The place (of ``hosts``) rank ``rank`` runs in."""
        return rank

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

    def _failure(self, first_failures: dict[int, int], scratch: Path) -> WorkerFailure | Stopped:
        """How the job ends once some workers ended: WorkerFailure naming the cause, or, when a
        stop signal reached a worker (not from here), ``Stopped`` as if it had reached this
        command."""
        stopped = stopped_rank(first_failures)
        if stopped is not None:
            rank, signum = stopped
            return stopping(signum, rank=rank)
        return root_cause(first_failures, read_error_reports(scratch))
