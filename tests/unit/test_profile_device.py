"""The profile ``gradsync simulate`` starts from, taken on the job's device: a GPU's per-tensor
times are kept apart from the CPU's (a file of measurements made on a GPU node serves a login
node), and a GPU this host lacks is one line."""

from __future__ import annotations

import pytest
import torch

from gradsync.jobs.compose import ConfigError, compose_jobs
from gradsync.measure.jobs import profile_key
from gradsync.measure.profile import profile_job


def _mlp(*overrides: str):
    (cfg,) = compose_jobs(["model=mlp", *overrides], multirun=False, launcher_here=False)
    return cfg


def test_a_gpus_profile_is_kept_apart_and_the_cpus_key_is_as_before():
    cpu, cuda = _mlp(), _mlp("trainer.device=cuda")
    assert profile_key(cuda) != profile_key(cpu)
    # Saved measurements (the reproductions') were all the CPU's, keyed without a device.
    assert "cuda" not in profile_key(cpu) and "cpu" not in profile_key(cpu)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a CUDA device")
def test_profiling_on_a_gpu_this_host_lacks_says_what_to_do():
    with pytest.raises(ConfigError, match="no CUDA device to profile on; profile on a GPU"):
        profile_job(_mlp("trainer.device=cuda"))


@pytest.mark.gpu
def test_a_gpu_profile_times_every_tensor_and_keeps_the_gradient_on_the_cpu():
    profiled = profile_job(_mlp("trainer.device=cuda"))
    profile = profiled.profile
    assert sum(profile.sizes) == profiled.gradient.numel() == 17_226
    assert profiled.gradient.device.type == "cpu"  # compressors are measured on the CPU
    assert sum(profile.backward) > 0 and sum(profile.forward) > 0 and profile.update > 0
