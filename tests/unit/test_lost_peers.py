"""A worker whose peer went away says so in one line and is never the job's cause; a stop signal
that reaches one worker stops the job as it stops the command (issue 51)."""

from __future__ import annotations

import os
import signal
import socket
import sys
from datetime import timedelta

import pytest
import torch.distributed as dist

from gradsync.launch import Launch, PeerLost
from gradsync.stop_signals import Stopped, stop_on_signals
from gradsync.train import worker
from gradsync.train.faults import CommTimeout, InjectedFault, as_comm_timeout, as_peer_lost
from runners.reports import read_error_reports, root_cause, stopped_rank
from runners.task import TaskRunner

LOST = (
    "lost its connection to a peer in a collective: another rank died or was stopped, or the "
    "network failed"
)

# What the backends say (gloo's as torch 2.14 raised it in this repository's failure tests; NCCL's
# ncclRemoteError as torch's NCCL check words it, and the communicator its watchdog aborted).
GLOO = "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:{line}] {text}"
LOST_PEER_ERRORS = [
    GLOO.format(line=561, text="Connection closed by peer [127.0.0.1]:56226. This is typically"),
    GLOO.format(line=545, text="Read error [127.0.0.1]:42133: Connection reset by peer."),
    GLOO.format(line=590, text="Write error [127.0.0.1]:42133: Broken pipe"),
    "NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network "
    "error, NCCL version 2.21.5\nncclRemoteError: A call failed possibly due to a network error",
    "NCCL communicator was aborted on rank 1.",
]


@pytest.mark.parametrize("text", LOST_PEER_ERRORS)
def test_what_a_backend_says_of_a_lost_peer_is_one_line(text):
    for error in (RuntimeError(text), dist.DistBackendError(text)):
        lost = as_peer_lost(error)
        assert isinstance(lost, PeerLost) and str(lost) == LOST


def test_a_store_whose_host_died_is_a_lost_peer():
    """torch's own type: the store rank 0 hosts is gone (a real TCPStore)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    timeout = timedelta(seconds=5)
    host = dist.TCPStore("127.0.0.1", port, 2, True, timeout=timeout, wait_for_workers=False)
    client = dist.TCPStore("127.0.0.1", port, 2, False, timeout=timeout)
    client.set("step", "1")
    del host
    with pytest.raises(dist.DistNetworkError) as raised:
        client.get("step")
    assert str(as_peer_lost(raised.value)) == (
        "lost its connection to the job's store: another rank died or was stopped, or the "
        "network failed"
    )


def test_a_lost_peer_a_scheduler_wrapped_is_found():
    """As the priority scheduler hands its communication thread's error on."""
    try:
        try:
            raise RuntimeError(LOST_PEER_ERRORS[0])
        except RuntimeError as exc:
            raise RuntimeError("scheduler=priority: the communication thread failed") from exc
    except RuntimeError as wrapped:
        assert str(as_peer_lost(wrapped)) == LOST


@pytest.mark.parametrize(
    "error",
    [
        InjectedFault("injected failure at step 3 (GRADSYNC_FAULT)"),
        RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        ValueError("connection reset by peer"),  # not a backend's error
        BrokenPipeError(32, "Broken pipe"),  # stdout closed, not a peer
    ],
    ids=["injected", "oom", "value", "stdout"],
)
def test_other_errors_are_not_a_lost_peer(error):
    assert as_peer_lost(error) is None


def test_a_timeout_stays_a_timeout():
    timed_out = RuntimeError(GLOO.format(line=545, text="Read error: Connection timed out"))
    timeout = as_comm_timeout(timed_out, 5)
    assert isinstance(timeout, CommTimeout)
    timeout.__cause__ = timed_out  # as the worker raises it
    assert as_peer_lost(timeout) is None


def _report(monkeypatch, tmp_path, rank: int, exc: BaseException) -> None:
    monkeypatch.setenv("GRADSYNC_ERROR_FILE", str(tmp_path / f"error-rank{rank}.json"))
    worker._report_failure(rank, exc)


def test_a_lost_peer_is_one_line_and_never_the_cause(monkeypatch, tmp_path, capsys):
    """The reports as workers write them: a peer that reported first is not the cause."""
    _report(monkeypatch, tmp_path, 0, as_peer_lost(RuntimeError(LOST_PEER_ERRORS[1])))
    assert capsys.readouterr().err == f"PeerLost: {LOST}\n"
    alone = root_cause({0: 1}, read_error_reports(tmp_path))
    assert (alone.rank, alone.reason, alone.detail) == (0, f"PeerLost: {LOST}", "")
    try:
        raise InjectedFault("injected failure at step 6 (GRADSYNC_FAULT)")
    except InjectedFault as exc:
        _report(monkeypatch, tmp_path, 1, exc)
    assert "Traceback" in capsys.readouterr().err  # a cause keeps its traceback
    cause = root_cause({0: 1, 1: 1}, read_error_reports(tmp_path))
    assert (cause.rank, cause.reason) == (
        1,
        "InjectedFault: injected failure at step 6 (GRADSYNC_FAULT)",
    )
    assert str(root_cause({0: 1, 1: -9}, read_error_reports(tmp_path))) == (
        "rank 1 failed: killed by SIGKILL"
    )


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ({1: 130}, (1, signal.SIGINT)),
        ({0: 1, 1: 143}, (1, signal.SIGTERM)),  # the peer that lost it failed in the same poll
        ({1: -15}, (1, signal.SIGTERM)),  # reached before the worker set its handler
        ({0: -9, 1: 130}, None),  # a death is the failure
        ({0: 1}, None),
        ({0: 137}, None),
    ],
)
def test_a_stop_signal_that_reached_a_worker(codes, expected):
    assert stopped_rank(codes) == expected


def test_a_worker_stopped_under_a_task_launcher_is_said_so():
    """Under torchrun or srun a task sees only its own worker's exit code."""
    assert str(root_cause({2: 130}, [])) == "rank 2 failed: stopped by SIGINT"
    assert (
        str(root_cause({2: 3}, [])) == "rank 2 failed: exited with code 3 and left no error report"
    )


@pytest.mark.parametrize(
    ("signum", "status", "reason"),
    [
        (signal.SIGINT, "terminated", "rank 1 terminated by SIGINT"),
        (signal.SIGTERM, "terminated", "rank 1 terminated by SIGTERM"),
    ],
)
def test_a_worker_stop_ends_the_job_as_the_commands_would(signum, status, reason):
    stop = Stopped(signum, rank=1)
    assert (stop.status, stop.reason, stop.exit_code) == (status, reason, 143)
    # The same signal to the command itself: Ctrl-C is the user's interruption.
    own = "interrupted" if signum == signal.SIGINT else "terminated"
    assert (Stopped(signum).status, Stopped(signum).exit_code) == (own, 128 + signum)


def test_a_stop_a_wrapper_raised_from_is_a_stop():
    try:
        try:
            raise Stopped(signal.SIGINT)
        except BaseException as exc:
            raise RuntimeError("scheduler=priority: the communication thread failed") from exc
    except RuntimeError as wrapped:
        stop = worker._stopped_by(wrapped)
    assert stop is not None and stop.exit_code == 130
    assert worker._stopped_by(RuntimeError("no")) is None


def test_a_forked_child_stops_as_python_would():
    """A data loader process forked from a worker catches KeyboardInterrupt, not Stopped."""
    with stop_on_signals():
        pid = os.fork()
        if pid == 0:  # the child: only look and leave
            defaults = (
                signal.getsignal(signal.SIGINT) is signal.default_int_handler
                and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
            )
            os._exit(0 if defaults else 1)
        _, status = os.waitpid(pid, 0)
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler  # not here
    assert os.waitstatus_to_exitcode(status) == 0


class _OneTask(TaskRunner):
    launcher = "test"

    def rank_env(self) -> dict[str, str]:
        return {"RANK": str(self.task), "WORLD_SIZE": str(self.workers)}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_task_whose_worker_a_stop_signal_reached_stops_as_the_local_runner_does(tmp_path, signum):
    """Under srun or torchrun, a worker stopped by SIGINT or SIGTERM (a real process that the
    signal ends) is the job terminated from outside, naming the rank, not a failure."""
    worker = [sys.executable, "-c", f"import os, signal; os.kill(os.getpid(), {int(signum)})"]
    runner = _OneTask(workers=2, task=1, tasks=2, report_grace_s=0)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(Stopped) as info:
            runner.run(Launch(argv=worker, run_dir=tmp_path))
    finally:  # the stop ignores further signals in this process, as a command's cleanup does
        for handled, handler in handlers.items():
            signal.signal(handled, handler)
    stop = info.value
    assert (stop.status, stop.reason) == ("terminated", f"rank 1 terminated by {signum.name}")
