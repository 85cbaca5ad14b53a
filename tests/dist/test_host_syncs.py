"""Every lockstep scheduler with the compressors of the GPU check (none, topk, deft, terngrad)
waits on the host only at the points it and its compressor declare.

On the CPU (two gloo ranks) the points each steady step passes are checked against the
declarations, so a point added without declaring it fails here. On a GPU (one NCCL rank, marked
``gpu``) the same steps also run under torch.cuda's sync debug mode set to "error", so a sync
that no point covers (an ``.item()``, a ``.tolist()``, a data-dependent size) fails too.
Parameter servers need server processes: ``tests/integration/test_host_sync_runs.py`` runs
them through ``gradsync run``."""

from __future__ import annotations

import pytest
import torch

from gradsync.comm.collective import TorchCollective
from gradsync.jobs.compose import ConfigError, compose_jobs
from gradsync.schedulers.registry import SCHEDULERS, peer_schedulers
from gradsync.train.build import build_sync
from gradsync.train.sync_check import HostSyncCheck, declared_host_syncs
from gradsync.train.timing import make_clock
from tests.helpers.dist import run_world
from tests.helpers.gpu import needs_gpus
from tests.helpers.training import train_synced

pytestmark = pytest.mark.dist

COMPRESSORS = ("none", "topk", "deft", "terngrad")
WARM_UP = 8  # past every scheduler's profiled steps (OMGS, DeFT: 5; US-Byte: 3)
CHECKED = 3
OPTIONS = {  # partitions of the tiny model (436 elements), so that several must be agreed on
    "bytescheduler": ["scheduler.partition_size=100"],
    "usbyte": ["scheduler.min_partition_size=16", "scheduler.max_partition_size=64"],
}


def _jobs(workers: int) -> dict[str, object]:
    """Every valid scheduler × compressor of the check, composed as ``gradsync run`` would."""
    jobs = {}
    for scheduler in peer_schedulers():
        for compressor in COMPRESSORS:
            overrides = [
                f"scheduler={scheduler}",
                f"compressor={compressor}",
                f"trainer.workers={workers}",
                *OPTIONS.get(scheduler, []),
            ]
            try:
                (cfg,) = compose_jobs(overrides, multirun=False, launcher_here=False)
            except ConfigError:  # a combination gradsync refuses (payloads that do not add up)
                continue
            jobs[f"{scheduler}+{compressor}"] = cfg
    return jobs


def _passed_points(rank: int, world_size: int, jobs: dict, device_type: str) -> dict:
    device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
    steps = WARM_UP + CHECKED
    passed = {}
    for name, cfg in jobs.items():
        sync = build_sync(cfg, collective=TorchCollective(), clock=make_clock(device))
        check = HostSyncCheck(declared=declared_host_syncs(cfg), device=device, from_step=WARM_UP)
        train_synced(sync, rank, world_size, steps, device, around_step=check.step)
        passed[name] = check.passed
    return passed


def _check(passed_by_rank: list[dict], jobs: dict) -> None:
    for passed in passed_by_rank:
        assert set(passed) == set(jobs)  # every job ran its checked steps
    # Declarations are not decoration: each declared point of a scheduler that ran is reached.
    reached = {point for passed in passed_by_rank for job in passed.values() for point in job}
    for scheduler in {name.split("+")[0] for name in jobs}:
        for point, _ in SCHEDULERS[scheduler].capabilities.host_syncs:
            assert point in reached, f"{scheduler} declares {point} and never passes it"


def test_steady_steps_wait_only_where_declared_on_cpu(tmp_path):
    jobs = _jobs(workers=2)
    assert {name.split("+")[0] for name in jobs} == set(peer_schedulers())
    _check(run_world(_passed_points, 2, tmp_path, jobs, "cpu", timeout=600), jobs)


@needs_gpus(1)
def test_steady_steps_wait_only_where_declared_on_a_gpu(tmp_path):
    jobs = _jobs(workers=1)
    _check(run_world(_passed_points, 1, tmp_path, jobs, "cuda", timeout=600, device="cuda"), jobs)
