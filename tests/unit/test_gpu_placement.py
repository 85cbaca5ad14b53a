"""Where a GPU job's workers find their GPUs: checked per node where the workers start, never on
a host that only submits the job. More workers than GPUs share them, round robin, over gloo;
NCCL asked for where it cannot work, and workers that do not fit in a GPU's memory, are refused
in one line. CUDA is faked here (device counts, memory, ``set_device``): these are the checks a
GPU user meets first, and this machine has no GPU."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from gradsync.cluster.devices import (
    gpus_on_node,
    local_device,
    missing_gpu,
    sharing_line,
    workers_on_node,
    workers_per_gpu,
)
from gradsync.cluster.env import DistEnv
from gradsync.data.once import load_in_turn
from gradsync.jobs.compose import ConfigError, compose_jobs
from gradsync.train import capacity, worker
from tests.helpers.dist import run_world

H100_BYTES = 80 * 10**9


@pytest.fixture
def gpus(monkeypatch):
    """``gpus(n, memory)``: this process sees n CUDA devices of ``memory`` bytes each; returns
    the devices ``set_device`` got."""
    chosen: list[int] = []

    def fake(count: int, memory: int = H100_BYTES) -> list[int]:
        properties = SimpleNamespace(total_memory=memory)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: properties)
        return chosen

    return fake


@pytest.fixture(autouse=True)
def _model_sizes_cached_here(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


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


def test_only_a_node_without_gpus_lacks_them():
    assert missing_gpu(gpus=8, workers_here=8, where="node a") is None
    assert missing_gpu(gpus=4, workers_here=8, where="node a") is None  # they share
    assert missing_gpu(gpus=0, workers_here=0, where="node a") is None  # servers only
    message = missing_gpu(gpus=0, workers_here=2, where="node a")
    assert message is not None and "node a has no usable CUDA device" in message
    assert "\n" not in message


def test_workers_go_round_robin_over_a_nodes_gpus():
    assert [local_device(r, 2) for r in range(5)] == [0, 1, 0, 1, 0]
    per_gpu = {g: [local_device(r, 3) for r in range(8)].count(g) for g in range(3)}
    assert max(per_gpu.values()) == workers_per_gpu(gpus=3, workers_here=8) == 3
    assert workers_per_gpu(gpus=8, workers_here=8) == 1
    assert workers_per_gpu(gpus=1, workers_here=4) == 4
    line = sharing_line(gpus=1, workers_here=4, where="this machine", backend="gloo")
    assert line == (
        "this machine: 4 workers share 1 GPU(s), placed round robin (up to 4 on one GPU); the "
        "workers' collectives go over gloo"
    )


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
    nccl = [*overrides, "trainer.backend=nccl"]
    assert compose_jobs(nccl, multirun=False)  # 2 nodes x 8 GPUs: each worker has its own
    gpus(4)
    assert compose_jobs(overrides, multirun=False)  # 8 workers share this node's 4 GPUs
    with pytest.raises(ConfigError, match=r"^trainer\.backend=nccl cannot run two workers on one"):
        compose_jobs(nccl, multirun=False)


def test_a_local_job_shares_the_gpus_here_unless_nccl_is_asked_for(gpus, monkeypatch):
    gpus(2)
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "8")  # inside an allocation: what we see counts
    both = ["trainer.device=cuda", "trainer.backend=nccl", "trainer.workers=2"]
    assert compose_jobs(both, multirun=False)
    assert compose_jobs(["trainer.device=cuda", "trainer.workers=4"], multirun=False)
    with pytest.raises(ConfigError, match=r"use trainer\.backend=gloo \(or auto\)"):
        compose_jobs([*both[:2], "trainer.workers=4"], multirun=False)
    gpus(0)
    with pytest.raises(ConfigError, match=r"^trainer\.device=cuda but this machine has no usable"):
        compose_jobs(["trainer.device=cuda", "trainer.workers=1"], multirun=False)


def test_nccl_is_refused_on_the_cpu_and_behind_shaped_links(gpus):
    gpus(4)
    with pytest.raises(
        ConfigError, match=r"^trainer\.backend=nccl needs GPUs.*trainer\.device=cpu"
    ):
        compose_jobs(["trainer.backend=nccl"], multirun=False, machine=False)
    shaped = ["runner=netem", "trainer.device=cuda", "trainer.backend=nccl", "trainer.workers=4"]
    with pytest.raises(ConfigError, match=r"would bypass the links the runner shapes"):
        compose_jobs(shaped, multirun=False, launcher_here=False)
    # gloo, which binds to the shaped interfaces, is what auto takes there.
    assert compose_jobs([*shaped[:2], "trainer.workers=4"], multirun=False, launcher_here=False)


def test_workers_that_do_not_fit_in_one_gpus_memory_are_refused(gpus):
    job = ["trainer.device=cuda", "model=resnet18", "dataset=synthetic", "trainer.batch_size=64"]
    (cfg,) = compose_jobs([*job, "trainer.workers=1"], multirun=False, machine=False)
    each = capacity.gpu_worker_bytes(cfg)
    assert capacity.CUDA_CONTEXT_BYTES < each < 4 * 2**30  # ResNet-18 at 32 px, batch 64
    gpus(1, memory=3 * each)
    assert compose_jobs([*job, "trainer.workers=3"], multirun=False)
    with pytest.raises(ConfigError, match=r"^4 workers on one GPU of this machine need about"):
        compose_jobs([*job, "trainer.workers=4"], multirun=False)
    forced = [*job, "trainer.workers=4", "trainer.allow_oversubscribe=true"]
    assert compose_jobs(forced, multirun=False)
    gpus(2, memory=3 * each)  # round robin: 2 per GPU
    assert compose_jobs([*job, "trainer.workers=4"], multirun=False)


# ---- where the workers start ----------------------------------------------------------------
def _worker_cfg(workers: int):
    trainer = {"device": "cuda", "workers": workers, "allow_oversubscribe": False}
    return OmegaConf.create({"trainer": trainer})


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


def test_a_node_with_fewer_gpus_than_workers_shares_them(gpus, monkeypatch):
    chosen = gpus(4)
    env = _slurm_task(monkeypatch, rank=13, local_rank=5, per_node=8, tasks=16)
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "4")
    monkeypatch.setattr(capacity, "model_size", lambda cfg: capacity.ModelSize(2**30, 0))
    assert worker._device(_worker_cfg(16), env) == torch.device("cuda", 1)
    assert chosen == [1]
    gpus(4, memory=12 * 2**30)  # 2 workers of 1 GiB context + 5 GiB of state: 12 GiB fit
    assert worker._device(_worker_cfg(16), env) == torch.device("cuda", 1)
    gpus(4, memory=12 * 2**30 - 1)
    with pytest.raises(worker.GpuTooSmall, match=r"2 workers on one GPU of node .* need about"):
        worker._device(_worker_cfg(16), env)


def test_a_node_without_gpus_fails_where_the_worker_starts(gpus, monkeypatch):
    gpus(0)
    env = _slurm_task(monkeypatch, rank=13, local_rank=5, per_node=8, tasks=16)
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "0")
    with pytest.raises(worker.NoGpuForWorker, match=r"has no usable CUDA device"):
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
