"""The priority schedulers hand each compressed partition to the engine's communication thread
as a scheduling job; a job that runs at once (before the hook that submitted it goes on) must
still count its own partition as ready, or the round's last partition is never sent."""

from __future__ import annotations

import threading
import time
from typing import Any

import torch
from torch import nn

from gradsync.comm.solo import SoloCollective
from gradsync.compressors.none import NoneCompressor
from gradsync.feedback.none import NoneFeedback
from gradsync.schedulers.priority.bytescheduler import ByteSchedulerSync


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 4)).double()


def test_a_scheduling_job_that_runs_before_its_hook_goes_on_sees_its_partition():
    torch.set_num_threads(1)
    model = _model()
    sync = ByteSchedulerSync(
        partition_size=20,
        credit=40,
        compressor=NoneCompressor(),
        feedback=NoneFeedback(),
        collective=SoloCollective(),
        clock=time.perf_counter,
    )
    sync.attach(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert sync._comm is not None
    submit = sync._comm.submit

    def submit_then_linger(work: Any, **kwargs: Any) -> Any:
        job = submit(work, **kwargs)
        time.sleep(0.005)  # the communication thread gets there first
        return job

    sync._comm.submit = submit_then_linger  # type: ignore[method-assign]
    sync.begin(step=0)
    model(torch.randn(4, 10, dtype=torch.float64)).sum().backward()
    sync.step(step=0)
    flushed = threading.Thread(target=sync.flush, daemon=True)
    flushed.start()
    flushed.join(timeout=30)
    assert not flushed.is_alive(), "a partition was never sent"
    sent = sorted(b for _, b in sync.send_log())
    assert sent == list(range(len(sync.plan.buckets)))
