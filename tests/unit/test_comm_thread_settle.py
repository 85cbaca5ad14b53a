"""Work a communication-thread job starts and finishes later (an asynchronous collective): the
job that finishes it settles it on the same thread, and other threads wait for that settlement
(on the CPU: the host waits; CUDA adds a completion event, not exercised here)."""

from __future__ import annotations

import threading

import pytest
import torch

from gradsync.schedulers.engine.comm_thread import THREAD_NAME, CommThread, Job
from gradsync.schedulers.engine.events import HostEvent

CPU = torch.device("cpu")


def test_a_later_job_settles_what_an_earlier_one_started_and_waiters_get_its_result():
    comm = CommThread(CPU)
    ran_on: list[str] = []

    def finish() -> int:
        ran_on.append(threading.current_thread().name)
        return 7

    started: Job[int] = Job(finish)
    assert not started.settled
    comm.submit(lambda: None).wait()
    assert not started.settled  # nothing settles it but the job that finishes it
    assert comm.submit(lambda: comm.settle_here(started)).wait() == 7
    assert started.settled and started.wait() == 7
    assert ran_on == [THREAD_NAME]
    comm.close()


def test_only_the_communication_thread_settles():
    comm = CommThread(CPU)
    with pytest.raises(RuntimeError, match="only on the communication thread"):
        comm.settle_here(Job(lambda: 1))
    comm.close()


def test_a_failure_while_settling_reaches_both_the_settling_job_and_the_waiters():
    comm = CommThread(CPU)

    def broken() -> int:
        raise ConnectionError("link down")

    started: Job[int] = Job(broken)
    settling = comm.submit(lambda: comm.settle_here(started))
    with pytest.raises(ConnectionError, match="link down"):
        settling.wait()
    with pytest.raises(ConnectionError, match="link down"):
        started.wait()
    comm.close()


def test_following_a_job_on_the_cpu_waits_for_nothing():
    comm = CommThread(CPU)
    handed = comm.submit(lambda: 1)
    assert isinstance(handed.ready, HostEvent)  # the GPU's path: an event that waits for nothing
    assert comm.submit(lambda: handed.follow()).wait() is None
    comm.close()


def test_a_job_stays_settled_while_a_waiter_passes_and_keeps_its_first_outcome():
    job: Job[int] = Job(lambda: 1)
    job.settle(3, None)
    # A waiter passing through holds the job's lock for a moment: the job is settled all along.
    job._pending.acquire()
    try:
        assert job.settled
        job.settle(None, RuntimeError("an error path that came second"))
    finally:
        job._pending.release()
    assert job.wait() == 3
    assert job.wait() == 3  # and its lock is still there for the next waiter
