"""A local job refuses, before anything starts, more processes than this host can hold: more
compute threads than its cores run, or more memory than it has (estimated from the model)."""

from __future__ import annotations

import pytest

from gradsync.cluster.host_checks import missing_sbatch
from gradsync.jobs.compose import ConfigError, compose_jobs
from gradsync.train.capacity import (
    PROCESS_BASE_BYTES,
    THREADS_PER_CORE,
    Host,
    ModelSize,
    capacity_problem,
    memory_problem,
    model_size,
    process_bytes,
    processes_problem,
)

GIB = 2**30


def _job(*overrides: str):
    (cfg,) = compose_jobs(list(overrides), multirun=False, launcher_here=False)
    return cfg


@pytest.mark.parametrize("cores", [1, 2, 64])
def test_threads_up_to_the_limit_fit_and_one_more_does_not(cores):
    host = Host(cores=cores, available_bytes=None)
    limit = cores * THREADS_PER_CORE
    assert processes_problem(limit, 1, host) is None
    assert "more than this host's" in str(processes_problem(limit + 1, 1, host))
    assert processes_problem(limit // 2, 2, host) is None
    assert processes_problem(limit // 2 + 1, 2, host) is not None


def test_memory_is_compared_with_what_is_available():
    host = Host(cores=64, available_bytes=10 * GIB)
    assert memory_problem(10, GIB, host) is None
    assert "11.0 GiB" in str(memory_problem(11, GIB, host))
    assert memory_problem(10**6, GIB, Host(cores=1, available_bytes=None)) is None


def test_the_estimate_grows_with_the_model_and_the_batch():
    small = process_bytes(_job("model=cnn", "dataset=synthetic"))
    large = process_bytes(_job("model=resnet18", "dataset=synthetic"))
    larger_batch = process_bytes(
        _job("model=resnet18", "dataset=synthetic", "trainer.batch_size=128")
    )
    assert PROCESS_BASE_BYTES < small < large < larger_batch
    # ResNet-18's 11.2M float32 parameters alone are 45 MB, held several times over.
    assert large - PROCESS_BASE_BYTES > 4 * 45e6


def test_gpt2_activations_count_beside_its_parameters():
    """Measured: one GPT-2 worker (10k vocabulary, batch 32 x 128) peaks at 6.2 GB, mostly
    activations, though its parameters are 357 MB."""
    estimate = process_bytes(_job("model=gpt2", "dataset=synthetic", "dataset.kind=tokens"))
    assert 5 * GIB < estimate < 8 * GIB


def test_a_model_is_sized_once_and_then_read_from_the_cache(tmp_path, monkeypatch):
    from gradsync.train import capacity

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cfg = _job("model=cnn", "dataset=synthetic")
    sized = model_size(cfg)
    assert sized == capacity.measure_model(cfg)
    assert (tmp_path / "gradsync" / "model_sizes.json").is_file()

    sized_again = []
    seven = ModelSize(parameter_bytes=1, activation_bytes=2)

    def measure(cfg):
        sized_again.append(cfg)
        return seven

    monkeypatch.setattr(capacity, "measure_model", measure)
    assert model_size(cfg) == sized and sized_again == []
    # Another batch is another size; a model that cannot be sized counts as the base.
    bigger = _job("model=cnn", "dataset=synthetic", "trainer.batch_size=64")
    assert process_bytes(bigger) == PROCESS_BASE_BYTES + 7 and len(sized_again) == 1
    assert capacity.gpu_worker_bytes(bigger) == capacity.CUDA_CONTEXT_BYTES + 7
    monkeypatch.setattr(capacity, "measure_model", lambda cfg: 1 / 0)
    assert process_bytes(_job("model=mlp", "dataset=synthetic")) == PROCESS_BASE_BYTES


def test_memory_is_sized_from_the_model_only_past_one_process_per_core():
    cfg = _job("model=gpt2", "dataset=synthetic", "dataset.kind=tokens")
    roomy = Host(cores=4, available_bytes=12 * GIB)
    assert capacity_problem(cfg, 4, roomy) is None  # one per core: only the base is counted
    assert "GiB" in str(capacity_problem(cfg, 5, roomy))


def test_a_local_job_with_too_many_workers_is_refused_with_the_override_that_forces_it():
    with pytest.raises(ConfigError) as info:
        compose_jobs(["trainer.workers=1000"], multirun=False)
    message = str(info.value)
    assert message.startswith("trainer.workers=1000: 1000 processes are more than this host's")
    assert "trainer.allow_oversubscribe=true" in message and "\n" not in message
    # Synthetic data: digits' 1,438 training images make no global batch for 1000 workers.
    forced = ["trainer.workers=1000", "trainer.allow_oversubscribe=true", "dataset=synthetic"]
    compose_jobs(forced, multirun=False)


@pytest.mark.skipif(missing_sbatch() is not None, reason="runner=slurm checks for sbatch")
def test_a_cluster_job_is_not_held_to_this_host():
    (cfg,) = compose_jobs(
        ["runner=slurm", "trainer.workers=1000", "dataset=synthetic"], multirun=False
    )
    assert cfg.trainer.workers == 1000
