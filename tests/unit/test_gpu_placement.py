"""Where a GPU job's workers find their GPUs: checked per node where the workers start, never on
a host that only submits the job. CUDA is faked here (device counts, ``set_device``): these are
the checks a GPU user meets first, and this machine has no GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from gradsync.config.compose import ConfigError, compose_jobs
from gradsync.data.once import load_in_turn
from gradsync.dist.devices import gpu_shortage, gpus_on_node, local_device, workers_on_node
from gradsync.dist.env import DistEnv
from gradsync.train import worker
from tests.helpers.dist import run_world


@pytest.fixture
def gpus(monkeypatch):
    """``gpus(n)``: this process sees n CUDA devices; returns the devices ``set_device`` got."""
    chosen: list[int] = []

    def fake(count: int) -> list[int]:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
        return chosen

    return fake


def _torchrun_env(monkeypatch, *, rank: int, local_rank: int, world: int, per_node: int) -> None:
    for var, value in {
        "RANK": rank,
        "LOCAL_RANK": local_rank,
        "WORLD_SIZE": world,
        "LOCAL_WORLD_SIZE": per_node,
        "MASTER_ADDR": "node0",
        "MASTER_PORT": 29500,
    }.items():
        monkeypatch.setenv(var, str(value))


# ---- the rules ---------------------------------------------------------------------------
def test_workers_on_a_node_are_its_block_of_ranks_below_the_servers():
    # 2 nodes x 8: every node holds 8 workers, whichever of its ranks asks.
    for rank in range(16):
        assert workers_on_node(rank=rank, local_rank=rank % 8, local_world_size=8, workers=16) == 8
    # 5 workers and a parameter server on 3 nodes of 2: the last node holds 1 worker.
    counts = [
        workers_on_node(rank=r, local_rank=r % 2, local_world_size=2, workers=5)
        for r in (0, 2, 4, 5)
    ]
    assert counts == [2, 2, 1, 1]


def test_slurm_says_what_the_node_has_when_each_task_sees_one_gpu():
    assert gpus_on_node({"SLURM_GPUS_ON_NODE": "8"}, 1, slurm_task=True) == 8
    assert gpus_on_node({}, 4, slurm_task=True) == 4
    # Processes a launcher starts on this host (local, torchrun) share what one sees, even
    # inside a Slurm allocation that bound one GPU to the task that launches them.
    assert gpus_on_node({"SLURM_GPUS_ON_NODE": "8"}, 1, slurm_task=False) == 1
    assert [local_device(r, 1) for r in range(8)] == [0] * 8  # bound: each sees its own
    assert [local_device(r, 8) for r in range(8)] == list(range(8))  # every task sees all


def test_shortage_names_the_counts_in_one_line():
    assert gpu_shortage(gpus=8, workers_here=8, where="node a") is None
    assert gpu_shortage(gpus=0, workers_here=0, where="node a") is None  # servers only
    message = gpu_shortage(gpus=4, workers_here=8, where="node a")
    assert message is not None and "node a has 4 GPU(s) for 8 workers" in message
    assert "\n" not in message


# ---- checks before anything starts --------------------------------------------------------
def test_a_slurm_submission_is_not_checked_on_the_submitting_host(gpus):
    gpus(0)  # a login node without GPUs
    cfg = compose_jobs(
        ["runner=slurm", "trainer.device=cuda", "trainer.workers=16", "runner.nodes=2"],
        multirun=False,
        launcher_here=False,  # no sbatch here; everything else about the machine is checked
    )[0]
    assert cfg.runner.gpus_per_node == 8  # asked for: one per worker of a node


def test_torchrun_checks_this_nodes_workers_not_the_whole_job(gpus, monkeypatch):
    gpus(8)
    _torchrun_env(monkeypatch, rank=9, local_rank=1, world=16, per_node=8)
    overrides = ["runner=torchrun", "trainer.device=cuda", "trainer.workers=16"]
    assert compose_jobs(overrides, multirun=False)  # 2 nodes x 8 GPUs: each node has 8
    gpus(4)
    with pytest.raises(ConfigError, match=r"this machine has 4 GPU\(s\) for 8 workers"):
        compose_jobs(overrides, multirun=False)


def test_a_local_job_needs_a_gpu_per_worker_here(gpus, monkeypatch):
    gpus(2)
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "8")  # inside an allocation: what we see counts
    assert compose_jobs(["trainer.device=cuda", "trainer.workers=2"], multirun=False)
    with pytest.raises(ConfigError, match=r"2 GPU\(s\) for 4 workers.*runner\.nodes"):
        compose_jobs(["trainer.device=cuda", "trainer.workers=4"], multirun=False)


# ---- where the workers start ----------------------------------------------------------------
def _worker_cfg(workers: int):
    return OmegaConf.create({"trainer": {"device": "cuda", "workers": workers}})


def _slurm_task(monkeypatch, *, rank: int, local_rank: int, per_node: int, tasks: int) -> DistEnv:
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", str(per_node))
    return DistEnv.from_environ(
        {
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(local_rank),
            "SLURM_NTASKS": str(tasks),
            "SLURM_NTASKS_PER_NODE": str(per_node),
            "SLURM_JOB_NODELIST": "gpu[01-02]",
            "SLURM_JOB_ID": "77",
        }
    )


def test_a_task_bound_to_one_gpu_takes_that_one(gpus, monkeypatch):
    chosen = gpus(1)  # the site binds one GPU per task
    env = _slurm_task(monkeypatch, rank=13, local_rank=5, per_node=8, tasks=16)
    assert worker._device(_worker_cfg(16), env) == torch.device("cuda", 0)
    assert chosen == [0]


def test_a_task_that_sees_its_nodes_gpus_takes_its_local_rank(gpus, monkeypatch):
    chosen = gpus(8)
    env = _slurm_task(monkeypatch, rank=13, local_rank=5, per_node=8, tasks=16)
    assert worker._device(_worker_cfg(16), env) == torch.device("cuda", 5)
    assert chosen == [5]


def test_a_node_with_too_few_gpus_fails_where_the_worker_starts(gpus, monkeypatch):
    gpus(4)
    env = _slurm_task(monkeypatch, rank=13, local_rank=5, per_node=8, tasks=16)
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "4")
    with pytest.raises(worker.NoGpuForWorker, match=r"has 4 GPU\(s\) for 8 workers"):
        worker._device(_worker_cfg(16), env)


def test_parameter_servers_take_no_gpu(gpus, monkeypatch):
    chosen = gpus(0)
    env = _slurm_task(monkeypatch, rank=4, local_rank=0, per_node=1, tasks=5)
    assert worker._device(_worker_cfg(4), env) == torch.device("cpu")
    assert chosen == []


# ---- one download per job -------------------------------------------------------------------
def _load_with_download(rank: int, world_size: int, roots: list[str], downloads: str) -> str:
    import time

    import torch.distributed as dist

    local_rank = rank % 2  # two "nodes" of two ranks
    root = Path(roots[rank // 2])

    def load() -> str:
        data = root / "data.bin"
        if not data.exists():  # what a dataset's download=true does: fetch what is missing
            (Path(downloads) / f"rank{rank}").touch()
            time.sleep(0.3)  # a download takes a while: a second writer would overlap it
            data.write_bytes(b"x")
        return data.read_text()

    return load_in_turn(load, rank=rank, local_rank=local_rank, barrier=dist.barrier)


@pytest.mark.parametrize(
    ("shared", "downloaders"), [(True, ["rank0"]), (False, ["rank0", "rank2"])]
)
def test_a_dataset_is_downloaded_once_per_filesystem(tmp_path, shared, downloaders):
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    roots = [tmp_path / "shared"] * 2 if shared else [tmp_path / "node0", tmp_path / "node1"]
    for root in roots:
        root.mkdir(exist_ok=True)
    results = run_world(
        _load_with_download, 4, tmp_path / "world", [str(r) for r in roots], str(downloads)
    )
    assert results == ["x"] * 4
    assert sorted(p.name for p in downloads.iterdir()) == downloaders
