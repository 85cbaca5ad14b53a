"""The process-group backends of a job (``gradsync/cluster/backends.py``): one decision, from the
device, ``trainer.backend``, the scheduler's registry entry, the runner, and whether workers
share a GPU anywhere (agreed by every rank through the rendezvous store)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.distributed as dist
from omegaconf import OmegaConf

from gradsync.cluster.agreement import any_rank
from gradsync.cluster.backends import (
    GLOO,
    NCCL,
    BackendRefused,
    Backends,
    choose_backends,
)
from gradsync.cluster.group_devices import HOST, bound_device, tensors_on
from gradsync.cluster.ports import free_port
from gradsync.compressors.sparse import SparseCtx
from gradsync.families import job_backends
from gradsync.jobs.compose import compose_jobs, resolved_yaml
from gradsync.schedulers.ps.host import pickled
from gradsync.schedulers.registry import SCHEDULERS, runs_servers

GPU = torch.device("cuda", 1)  # a device object only: nothing here touches CUDA


@pytest.mark.parametrize(
    ("device", "parameter_server", "expected"),
    [
        ("cpu", False, Backends(world=GLOO, workers=GLOO)),
        ("cpu", True, Backends(world=GLOO, workers=GLOO)),
        ("cuda", False, Backends(world=NCCL, workers=NCCL)),
        # Servers share the default group and receive from any worker: gloo, on the host.
        ("cuda", True, Backends(world=GLOO, workers=NCCL)),
    ],
)
def test_each_device_and_topology_gets_its_backends(device, parameter_server, expected):
    assert choose_backends(device=device, parameter_server=parameter_server) == expected


@pytest.mark.parametrize(
    ("requested", "shares_gpus", "shaped_links", "workers"),
    [
        ("auto", False, False, NCCL),
        ("auto", True, False, GLOO),  # NCCL refuses two ranks on one GPU
        ("auto", False, True, GLOO),  # runner=netem shapes what gloo sends
        ("gloo", False, False, GLOO),
        ("nccl", False, False, NCCL),
    ],
)
def test_gpu_workers_take_nccl_only_where_it_works(requested, shares_gpus, shaped_links, workers):
    for servers in (False, True):
        chosen = choose_backends(
            device="cuda",
            parameter_server=servers,
            requested=requested,
            shares_gpus=shares_gpus,
            shaped_links=shaped_links,
        )
        assert chosen == Backends(world=GLOO if servers else workers, workers=workers)


@pytest.mark.parametrize(
    ("device", "shares_gpus", "shaped_links", "why"),
    [
        ("cpu", False, False, r"needs GPUs, and trainer\.device=cpu"),
        ("cuda", True, False, r"cannot run two workers on one GPU"),
        ("cuda", False, True, r"would bypass the links the runner shapes"),
    ],
)
def test_nccl_where_it_cannot_work_is_refused_in_one_line(device, shares_gpus, shaped_links, why):
    with pytest.raises(BackendRefused, match=why) as info:
        choose_backends(
            device=device,
            parameter_server=False,
            requested=NCCL,
            shares_gpus=shares_gpus,
            shaped_links=shaped_links,
        )
    assert "\n" not in str(info.value) and "trainer.backend=gloo" in str(info.value)


def test_cpu_jobs_stay_on_gloo_whatever_else_holds():
    for requested in ("auto", "gloo"):
        for shaped_links in (False, True):
            chosen = choose_backends(
                device="cpu", parameter_server=False, requested=requested, shaped_links=shaped_links
            )
            assert chosen == Backends(world=GLOO, workers=GLOO)


COMPOSE_WITHOUT_TORCH = """
import sys
from gradsync.jobs.compose import ConfigError, compose_jobs
compose_jobs(["trainer.max_steps=5"], multirun=False)
compose_jobs(["runner=netem", "trainer.workers=4"], multirun=False, launcher_here=False)
try:
    compose_jobs(["trainer.backend=nccl"], multirun=False)
except ConfigError:
    pass
print(sorted(name for name in sys.modules if name.split(".")[0] == "torch")[:3])
"""


def test_the_command_line_decides_the_backend_without_importing_torch(tmp_path):
    """A CPU job is checked and its backend decided in the launching process without torch,
    which costs a second or more to import (a GPU job imports it to count the GPUs). The one
    exception is the first job of a model × dataset × batch on this host: its model is tried on
    the meta device (``train/shape_check.py``), and the answer kept in the cache of model sizes,
    so the next launch of such a job imports nothing."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}  # no model tried yet
    imported = [
        subprocess.run(
            [sys.executable, "-c", COMPOSE_WITHOUT_TORCH],
            capture_output=True, text=True, check=True, env=env,
        ).stdout.strip()
        for _ in range(2)
    ]  # fmt: skip
    assert imported[0] != "[]", "the first job's model was not tried on its inputs"
    assert imported[1] == "[]", imported[1]


def test_a_netem_job_on_gpus_talks_over_gloo():
    overrides = ["runner=netem", "trainer.device=cuda", "trainer.workers=4"]
    (cfg,) = compose_jobs(overrides, multirun=False, machine=False)
    assert job_backends(OmegaConf.create(resolved_yaml(cfg))) == Backends(GLOO, GLOO)


@pytest.mark.parametrize("flags", [[False] * 4, [False, False, True, False], [True] * 4])
def test_every_rank_learns_whether_any_node_shares_a_gpu(flags):
    """Over a real TCP store, as the workers agree before they make their groups: a node
    that shares a GPU turns every rank to gloo, not only its own."""
    port, ranks = free_port(), len(flags)
    # Rank 0's store serves the others; it lives on (in the process group) after it agreed.
    server = dist.TCPStore("127.0.0.1", port, ranks + 1, is_master=True, wait_for_workers=False)

    def agree(rank: int) -> bool:
        store = dist.TCPStore("127.0.0.1", port, ranks + 1, is_master=False)
        return any_rank(store, flags[rank], world_size=ranks, key="shares_gpus")

    with ThreadPoolExecutor(ranks) as pool:
        answers = list(pool.map(agree, range(ranks)))
    assert answers == [any(flags)] * ranks
    del server


def test_an_unknown_device_has_no_backend():
    with pytest.raises(ValueError, match=r"trainer\.device=tpu; use cpu or cuda"):
        choose_backends(device="tpu", parameter_server=False)


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_the_job_reads_servers_from_the_registry_also_from_the_yaml_workers_get(name):
    """Decided by the entry's ``parameter_server``, never by name; the same answer from the
    typed config and from the resolved YAML a worker loads."""
    servers = SCHEDULERS[name].capabilities.parameter_server
    (cfg,) = compose_jobs(
        [f"scheduler={name}", "trainer.device=cuda"], multirun=False, machine=False
    )
    as_workers_read_it = OmegaConf.create(resolved_yaml(cfg))
    for config in (cfg, as_workers_read_it):
        assert runs_servers(config.scheduler) is servers
        assert job_backends(config) == Backends(world=GLOO if servers else NCCL, workers=NCCL)


def test_parameter_server_schedulers_take_gpu_workers():
    with_servers = [s for s in SCHEDULERS.values() if s.capabilities.parameter_server]
    assert with_servers and all("cuda" in s.capabilities.devices for s in with_servers)


def test_only_nccl_groups_are_bound_to_a_gpu_and_gloo_tensors_live_on_the_host():
    assert bound_device(NCCL, GPU) == GPU and tensors_on(NCCL, GPU) == GPU
    assert bound_device(GLOO, GPU) is None and tensors_on(GLOO, GPU) == HOST
    # A parameter server (on the host) is outside the workers' NCCL group: nothing to bind.
    assert bound_device(NCCL, HOST) is None


def test_a_context_of_host_tensors_pickles_as_before():
    """What a CPU worker pushes is unchanged, byte for byte (its size is counted as traffic)."""
    ctx = SparseCtx(indices=torch.tensor([3, 1, 4]), shape=torch.Size([8]))
    layout = [(torch.float32, (3,))]
    assert pickled((ctx, layout)) == pickle.dumps((ctx, layout))
