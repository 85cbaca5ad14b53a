"""The byte count a communication thread adds to while the training thread takes it (DeFT's
sends carried past a step): nothing added is lost between two takes."""

from __future__ import annotations

import threading
import time

import pytest

from gradsync.comm import collective
from gradsync.comm.collective import ByteCount, ByteCounter

ADDS = 2_000


class _Preempted(ByteCount):
    """A count whose every write first lets another thread run: a thread switch between an
    addition's read and its write back, which a free-threaded build or an ill-timed switch
    also makes."""

    def __setattr__(self, name: str, value: object) -> None:
        time.sleep(0)
        super().__setattr__(name, value)


def test_counts_taken_while_another_thread_adds_lose_nothing(monkeypatch):
    monkeypatch.setattr(collective, "ByteCount", _Preempted)
    counter = ByteCounter()
    done = threading.Event()

    def add() -> None:
        for _ in range(ADDS):
            counter.add(1, 2.0)
        done.set()

    taken_payload, taken_wire = 0, 0.0
    adder = threading.Thread(target=add)
    adder.start()
    while not done.is_set():
        count = counter.take()
        taken_payload += count.payload
        taken_wire += count.wire
    adder.join()
    last = counter.take()
    assert taken_payload + last.payload == ADDS
    assert taken_wire + last.wire == pytest.approx(2.0 * ADDS)
