"""The engine's timer and communication thread on the CPU (the same API as on CUDA): spans add
up and are read at the step's end; jobs run in submission order on one thread."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from gradsync.schedulers.engine.comm_thread import THREAD_NAME, CommThread
from gradsync.schedulers.engine.step_timer import Elapsed, StepTimer, elapsed

CPU = torch.device("cpu")


def test_spans_of_a_name_add_up_and_are_read_once_at_the_end():
    timer = StepTimer(CPU)
    step_start = timer.mark()
    for _ in range(3):
        with timer.span("compress"):
            time.sleep(0.01)
    middle = timer.mark()
    time.sleep(0.02)
    timer.add("comm", middle, timer.mark())
    timer.add("step", step_start, timer.mark())
    seconds = timer.read()
    # Lower bounds only: a sleep may overrun by any amount on a loaded machine.
    assert seconds["compress"] >= 0.03 and seconds["comm"] >= 0.02
    assert seconds["compress"] + seconds["comm"] <= seconds["step"]
    assert seconds["never added"] == 0.0
    assert timer.read()["compress"] == 0.0  # a read starts the next step's count


def test_marks_cost_nothing_until_read():
    """Marks are plain values: taking them does not compute any time yet (on CUDA: events)."""
    timer = StepTimer(CPU)
    start = timer.mark()
    end = timer.mark()
    assert isinstance(start, float) and end >= start
    timer.add("x", start, end)
    assert timer.read()["x"] == pytest.approx(end - start)


def test_jobs_run_in_submission_order_on_the_one_communication_thread():
    comm = CommThread(CPU)
    ran: list[tuple[int, str]] = []

    def work(i: int):
        time.sleep(0.002 * (5 - i))  # earlier jobs are slower: order is not finish order
        ran.append((i, threading.current_thread().name))
        return i * 10

    jobs = [comm.submit(lambda i=i: work(i)) for i in range(5)]
    assert [job.wait() for job in reversed(jobs)] == [40, 30, 20, 10, 0]
    assert ran == [(i, THREAD_NAME) for i in range(5)]
    comm.close()


def test_a_failed_job_raises_where_it_is_waited_for_and_later_jobs_still_run():
    comm = CommThread(CPU)
    failed = comm.submit(lambda: 1 / 0)
    later = comm.submit(lambda: "fine")
    assert later.wait() == "fine"
    with pytest.raises(ZeroDivisionError):
        failed.wait()
    comm.close()


def test_a_span_and_its_offset_are_seconds_on_the_cpu_at_once():
    assert elapsed(1.0, 3.5, 0.25) == 2.75


@pytest.mark.gpu
def test_a_span_between_cuda_events_is_read_only_when_asked():
    timer = StepTimer(torch.device("cuda"))
    start = timer.mark()
    torch.cuda._sleep(10_000_000)  # keep the stream busy: the span must wait for it
    span = elapsed(start, timer.mark(), 1.0)
    assert isinstance(span, Elapsed)  # nothing read yet: the step went on without waiting
    assert float(span) > 1.0


def test_seconds_add_and_subtract_spans_without_reading_them():
    """What a step returns on CUDA: spans between marks kept unread through the arithmetic the
    schedulers do (``step_stats``), read once by ``float()``. Marks here are wall-clock ones."""
    from gradsync.durations import Seconds

    compress = Seconds(((1, 0.0, 3.0),))  # a 3 s span
    agree = Seconds(((1, 1.0, 2.0),), constant=0.5)  # 1.5 s
    assert float(compress - agree) == pytest.approx(1.5)
    assert float(2.0 + agree) == pytest.approx(3.5)
    assert float(10.0 - compress) == pytest.approx(7.0)
    assert float(-(compress + agree)) == pytest.approx(-4.5)
    assert float(Elapsed(0.0, 2.0, agree)) == pytest.approx(3.5)  # a lazy offset, as the loop's
