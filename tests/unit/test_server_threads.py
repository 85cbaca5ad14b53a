"""How many threads a parameter server computes with (``gradsync/train/servers.py``): the
cores of its host that the workers there leave, shared by the servers there; under Slurm its
task's own cores."""

from __future__ import annotations

import os

import pytest
from omegaconf import OmegaConf

from gradsync.cluster.env import DistEnv
from gradsync.train.servers import leftover_threads, server_threads


@pytest.mark.parametrize(
    ("cpus", "workers_here", "threads_per_worker", "servers", "threads"),
    [
        (16, 1, 1, 1, 15),  # one GPU worker and its server on a host
        (16, 4, 2, 2, 4),
        (16, 0, 1, 1, 16),  # a host of servers only
        (2, 3, 1, 1, 1),  # oversubscribed: still one
    ],
)
def test_servers_share_the_cores_the_workers_leave(
    cpus, workers_here, threads_per_worker, servers, threads
):
    assert (
        leftover_threads(
            cpus=cpus,
            workers_here=workers_here,
            threads_per_worker=threads_per_worker,
            servers=servers,
        )
        == threads
    )


def _env(rank: int, local_rank: int, local_world_size: int, launcher: str) -> DistEnv:
    return DistEnv(
        rank=rank, world_size=6, local_rank=local_rank, local_world_size=local_world_size,
        init_method="env://", launcher=launcher,
    )  # fmt: skip


CFG = OmegaConf.create({"trainer": {"workers": 4, "threads_per_worker": 2}})


def test_a_local_server_takes_what_the_workers_on_its_node_leave(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(16)), raising=False)
    # One node: 4 workers (2 threads each) and 2 servers share 16 cores.
    assert server_threads(CFG, _env(4, 4, 6, "local"), {}) == (16 - 4 * 2) // 2
    # A node of its own (ranks 4 and 5 on the second node): all of its cores.
    assert server_threads(CFG, _env(5, 1, 2, "torchrun"), {}) == 16 // 2


def test_under_slurm_a_server_takes_its_tasks_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(64)), raising=False)
    environ = {"SLURM_CPUS_PER_TASK": "10"}
    assert server_threads(CFG, _env(4, 0, 1, "slurm"), environ) == 10
