"""Which process group carries what in a real job with a parameter server: the worker entry
point (``run_worker``) on three gloo ranks, two workers and a server, with every
torch.distributed call recorded with the ranks of its group.

The workers' own collectives (metrics, evaluation, checkpoints, a compressor that talks while it
selects) go on the workers' group, never on one the server is in; every push and pull goes on a
group the server is in, never on the workers'. The only collectives of the whole job are the
start-up broadcast of the model and the last barrier. On GPUs the two kinds of group have
different backends (NCCL among workers, gloo with the servers: ``gradsync/cluster/backends.py``),
so anything on the wrong one would fail there; here the groups are told apart by their ranks."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from gradsync.cluster.env import DistEnv
from gradsync.jobs.compose import compose_jobs, write_resolved
from tests.helpers.dist import run_world

pytestmark = pytest.mark.dist

WORKERS = 2
EVERYONE, AMONG_WORKERS = (0, 1, 2), (0, 1)
COLLECTIVES = ("all_reduce", "all_gather", "broadcast", "barrier")
POINT_TO_POINT = ("send", "recv", "isend", "irecv")
JOBS = {
    "ps_bsp": ["scheduler=ps_bsp", "compressor=topk", "compressor.exchange=union"],
    "osp": ["scheduler=osp", "scheduler.budget=0.5"],  # ICS on the background group
}
COMMON = ["model=mlp", f"trainer.workers={WORKERS}", "trainer.max_steps=6", "trainer.log_every=2"]


Record = list[tuple[str, tuple[int, ...]]]


def _recorded(name: str, real: Callable[..., Any], calls: Record) -> Callable[..., Any]:
    @functools.wraps(real)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        group = kwargs.get("group") or dist.group.WORLD
        calls.append((name, tuple(dist.get_process_group_ranks(group))))
        return real(*args, **kwargs)

    return recorded


def _recording(calls: Record) -> None:
    """Every torch.distributed call gradsync makes, as (name, ranks of its group), in order;
    the real call runs."""
    for name in COLLECTIVES + POINT_TO_POINT:
        setattr(dist, name, _recorded(name, getattr(dist, name), calls))


def _run_jobs(rank: int, world_size: int, configs: dict[str, Path], root: Path) -> dict:
    from omegaconf import OmegaConf

    from gradsync.train.worker import run_worker

    dist.destroy_process_group()  # the harness's group: run_worker makes the job's own
    calls: Record = []
    _recording(calls)
    seen = {}
    for name, path in configs.items():
        if dist.is_initialized():
            dist.destroy_process_group()
        calls.clear()
        store = f"file://{root / name}.store"
        env = DistEnv(
            rank=rank, world_size=world_size, local_rank=rank, local_world_size=world_size,
            init_method=store, launcher="test",
        )  # fmt: skip
        run_worker(OmegaConf.load(path), env, root / name)
        seen[name] = list(calls)
    return seen


@pytest.fixture(scope="module")
def calls(tmp_path_factory) -> dict[str, list[Record]]:
    root = tmp_path_factory.mktemp("ps_traffic")
    configs = {}
    for name, overrides in JOBS.items():
        (cfg,) = compose_jobs([*overrides, *COMMON], multirun=False, launcher_here=False)
        configs[name] = root / f"{name}.yaml"
        (root / name).mkdir()
        write_resolved(cfg, configs[name])
    ranks = run_world(_run_jobs, WORKERS + 1, root / "harness", configs, root, timeout=240)
    return {name: [rank[name] for rank in ranks] for name in JOBS}


def _whole_job_collectives(record: Record) -> list[str]:
    return [op for op, ranks in record if op in COLLECTIVES and ranks == EVERYONE]


@pytest.mark.parametrize("job", list(JOBS))
def test_the_workers_collectives_never_include_the_server(calls, job):
    for record in calls[job][:WORKERS]:
        among_workers = [op for op, ranks in record if op in COLLECTIVES and ranks != EVERYONE]
        assert among_workers, "metrics, evaluation and checkpoints are reduced among workers"
        assert {ranks for op, ranks in record if op in COLLECTIVES} == {EVERYONE, AMONG_WORKERS}


@pytest.mark.parametrize("job", list(JOBS))
def test_pushes_and_pulls_always_reach_the_server_and_never_use_the_workers_group(calls, job):
    for record in calls[job]:
        pairs = [ranks for op, ranks in record if op in POINT_TO_POINT]
        assert pairs, "every rank talks to the server"
        assert set(pairs) == {EVERYONE}


@pytest.mark.parametrize("job", list(JOBS))
def test_the_whole_job_meets_only_for_the_model_broadcast_and_the_last_barrier(calls, job):
    everyone = [_whole_job_collectives(record) for record in calls[job]]
    assert all(ops == everyone[0] for ops in everyone)  # the server takes part in each
    broadcasts = len(everyone[0]) - 1
    assert broadcasts > 0 and everyone[0] == ["broadcast"] * broadcasts + ["barrier"]
    for record in calls[job]:
        assert record[:broadcasts] == [("broadcast", EVERYONE)] * broadcasts  # first of all
        assert record[-1] == ("barrier", EVERYONE)  # last of all
