"""The loop's logged metrics go through the scheduler's communication thread, between steps:
they take their place after the step's exchanges, their wait is no part of the next step's
figures, and once the scheduler is closed they go straight to the workers' collective."""

from __future__ import annotations

import time

import pytest
import torch

from gradsync.comm.collective import TorchCollective
from gradsync.compressors.topk import TopKCompressor
from gradsync.feedback.residual import ResidualFeedback
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from tests.helpers.dist import run_world

pytestmark = pytest.mark.dist

LATE_S = 0.5  # how long rank 1 keeps rank 0 waiting in the metrics all-reduce


def _step(sync: AllreduceSync, model: torch.nn.Module, step: int):
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    sync.begin(step=step)
    return sync.step(step=step)


def _log_between_steps(rank: int, world_size: int) -> dict:
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    model = torch.nn.Linear(64, 8)
    collective = TorchCollective()
    sync = AllreduceSync(
        compressor=TopKCompressor(density=0.1, exchange="union"),
        feedback=ResidualFeedback(),
        collective=collective,
        clock=time.perf_counter,
    )
    sync.attach(model, torch.optim.SGD(model.parameters(), lr=0.1))
    _step(sync, model, 0)
    if rank == 1:
        time.sleep(LATE_S)
    queued = sync.metrics_collective()
    summed = queued.reduce_metrics([1.0, float(rank)], device=torch.device("cpu"))
    after_log = _step(sync, model, 1)
    sync.close()
    closed = sync.metrics_collective()
    return {
        "queued_is_plain": queued is collective,
        "summed": summed,
        "compress": after_log.time_compress,
        "comm": after_log.time_comm,
        "closed_is_plain": closed is collective,
        "after_close": closed.reduce_metrics([2.0], device=torch.device("cpu")),
    }


def test_logged_metrics_go_through_the_thread_and_stay_out_of_the_next_step(tmp_path):
    results = run_world(_log_between_steps, 2, tmp_path)
    for r in results:
        assert not r["queued_is_plain"]  # through the communication thread while it runs
        assert r["summed"] == [2.0, 1.0]
        # Rank 0 waited LATE_S for rank 1 in the metrics all-reduce: none of it is step 1's.
        assert r["compress"] >= 0.0
        assert r["comm"] < LATE_S / 2
        assert r["closed_is_plain"] and r["after_close"] == [4.0]
