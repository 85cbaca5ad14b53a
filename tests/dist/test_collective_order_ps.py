"""The ordering rules of ``test_collective_order.py`` for the parameter-server family: workers
push to and pull from a server point to point, so the recorder also sees ``send``/``recv`` on
the whole job's collective (``world()``). Every worker issues the same operations on every
communicator in the same order, none beside another, and within a step only the scheduler's
communication thread issues them (compressors' collectives included).

OSP is left out: its in-computation synchronization is meant to stay in flight beside the next
step's traffic, on a background group of its own (see ``gradsync/schedulers/ps/osp.py``)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from omegaconf import DictConfig, OmegaConf

from gradsync.config.schema import TrainerConfig
from gradsync.feedback.none import NoneFeedback
from gradsync.feedback.residual import ResidualFeedback
from gradsync.schedulers.engine.comm_thread import THREAD_NAME
from gradsync.schedulers.ps.config import PsBspConfig
from gradsync.schedulers.ps.groups import make_groups
from gradsync.schedulers.ps.worker import PsSync
from gradsync.train.servers import serve
from tests.dist import test_collective_order as pipelined
from tests.dist.test_collective_order import (
    COMPRESSORS,
    STEPS,
    WORKERS,
    Call,
    CallLog,
    RecordingCollective,
    _shapes,
    run_steps,
)
from tests.helpers.dist import run_world
from tests.helpers.training import sgd, tiny_model

pytestmark = pytest.mark.dist

SERVER_COMPRESSORS = {  # what the server builds to decompress, as COMPRESSORS builds them
    "terngrad": {"_target_": "gradsync.compressors.terngrad.TernGradCompressor"},
    "topk-union": {
        "_target_": "gradsync.compressors.topk.TopKCompressor",
        "density": 0.3,
        "exchange": "union",
    },
    "cltk": {"_target_": "gradsync.compressors.cltk.CLTKCompressor", "density": 0.3},
    "deft": {"_target_": "gradsync.compressors.deft.DEFTCompressor", "density": 0.3},
}


class RecordingLinks(RecordingCollective):
    """Also records point-to-point, and hands out a recorded ``world()``."""

    def world(self):
        return RecordingLinks(log=self.log, name="world")

    def send(self, payload, *, dst, tag=0):
        run = lambda: super(RecordingLinks, self).send(payload, dst=dst, tag=tag)  # noqa: E731
        return self._recorded(f"send/{dst}/{tag}", _shapes(payload, ragged=True), run)

    def recv(self, payload, *, src=None, tag=0):
        run = lambda: super(RecordingLinks, self).recv(payload, src=src, tag=tag)  # noqa: E731
        return self._recorded(f"recv/{src}/{tag}", _shapes(payload, ragged=True), run)

    def start_send(self, payload, *, dst, tag=0):
        token = self.log.begin(self.name, f"send/{dst}/{tag}", _shapes(payload, ragged=True))
        return self._ending(token, super().start_send(payload, dst=dst, tag=tag))

    def start_recv(self, payload, *, src, tag=0):
        token = self.log.begin(self.name, f"recv/{src}/{tag}", _shapes(payload, ragged=True))
        return self._ending(token, super().start_recv(payload, src=src, tag=tag))


def _cfg(name: str) -> DictConfig:
    trainer = OmegaConf.structured(TrainerConfig(workers=WORKERS, lr=0.1))
    scheduler = OmegaConf.structured(PsBspConfig())
    compressor = SERVER_COMPRESSORS[name]
    return OmegaConf.create({"trainer": trainer, "scheduler": scheduler, "compressor": compressor})


def _train(rank: int, workers, name: str) -> list[Call]:
    model = tiny_model()
    if rank >= WORKERS:
        serve(_cfg(name), model, server=rank - WORKERS, steps_per_epoch=STEPS, total_steps=STEPS)
        return []
    log = CallLog()
    compressor = COMPRESSORS[name]()
    sync = PsSync(
        compressor=compressor,
        feedback=ResidualFeedback() if compressor.error_feedback else NoneFeedback(),
        collective=RecordingLinks(log=log, group=workers),
        clock=time.perf_counter,
    )
    return run_steps(sync, model, sgd(model), log, rank, WORKERS)


def _record_all(rank: int, world_size: int) -> dict:
    workers = make_groups(WORKERS, timedelta(seconds=60))
    return {"records": {name: _train(rank, workers, name) for name in COMPRESSORS}}


@pytest.fixture(scope="module")
def worker_ranks(tmp_path_factory) -> list[dict]:
    return run_world(_record_all, WORKERS + 1, tmp_path_factory.mktemp("order_ps"))[:WORKERS]


def test_every_step_pushes_and_pulls_through_the_recorded_world(worker_ranks):
    for rank in worker_ranks:
        for name, calls in rank["records"].items():
            for step in range(STEPS):
                ops = [c.operation for c in calls if c.step == step and c.communicator == "world"]
                assert any(op.startswith("send/") for op in ops), (name, step)
                assert any(op.startswith("recv/") for op in ops), (name, step)


def test_every_worker_issues_the_same_operations_in_the_same_order(worker_ranks):
    pipelined.test_every_rank_issues_the_same_collectives_in_the_same_order(worker_ranks)


def test_no_operation_runs_beside_another(worker_ranks):
    pipelined.nothing_runs_beside_another(worker_ranks)


def test_within_a_step_only_the_communication_thread_talks(worker_ranks):
    for rank in worker_ranks:
        for name, calls in rank["records"].items():
            threads = {c.thread for c in calls if c.step is not None}
            assert threads == {THREAD_NAME}, (name, threads)
