"""Point-to-point through the engine's queued collective: each call runs on the scheduler's
communication thread, in the order it was made, and gives the inner collective's answer."""

from __future__ import annotations

import threading

import torch

from gradsync.comm.solo import SoloCollective
from gradsync.schedulers.engine.comm_thread import THREAD_NAME, CommThread
from gradsync.schedulers.engine.queued_collective import QueuedCollective
from gradsync.schedulers.engine.step_timer import StepTimer


class _Peer(SoloCollective):
    """Records where and in what order point-to-point calls run; a receive gets 7s."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def send(self, payload, *, dst, tag=0):
        self.calls.append((f"send/{dst}/{tag}", threading.current_thread().name))

    def recv(self, payload, *, src=None, tag=0):
        self.calls.append((f"recv/{src}/{tag}", threading.current_thread().name))
        for tensor in payload:
            tensor.fill_(7)
        return 3 if src is None else src


def test_point_to_point_runs_on_the_communication_thread_in_order():
    peer, cpu = _Peer(), torch.device("cpu")
    queued = QueuedCollective(peer, CommThread(cpu), StepTimer(cpu))
    sent = queued.start_send((torch.ones(2),), dst=1, tag=4)
    pending = queued.start_recv((torch.zeros(2),), src=2, tag=5)
    queued.send((torch.ones(1),), dst=2)
    assert queued.recv((torch.zeros(1),)) == 3
    sent()
    assert pending()[0].tolist() == [7.0, 7.0]
    assert peer.calls == [
        ("send/1/4", THREAD_NAME),
        ("recv/2/5", THREAD_NAME),
        ("send/2/0", THREAD_NAME),
        ("recv/None/0", THREAD_NAME),
    ]
    assert queued.world() is peer
