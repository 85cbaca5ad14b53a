"""The process-group backends of a job (``gradsync/dist/backends.py``): one decision, from the
device and the scheduler's registry entry, for every (device, parameter server) combination."""

from __future__ import annotations

import pickle

import pytest
import torch
from omegaconf import OmegaConf

from gradsync.compressors.sparse import SparseCtx
from gradsync.config.compose import compose_jobs, resolved_yaml
from gradsync.dist.backends import (
    GLOO,
    HOST,
    NCCL,
    Backends,
    bound_device,
    choose_backends,
    job_backends,
    tensors_on,
)
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
