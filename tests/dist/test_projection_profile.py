"""Profiling the composed job's model on this host (``measure/profile.py``): the per-tensor
times and sizes line up with the model, warming up trains it, and the link probe runs real gloo
workers and reports sane delays for calls after computing and calls made while computing, and
what a Predictor measured is saved and reused without measuring again, or with a run's own
compute time in place of the modelled one."""

from __future__ import annotations

import pytest
import torch

from gradsync.jobs.compose import compose_jobs
from gradsync.measure import MeasurementError
from gradsync.measure.profile import probe_links, profile_job

pytestmark = pytest.mark.dist


@pytest.fixture(scope="module")
def mlp_job():
    (cfg,) = compose_jobs(["model=mlp", "trainer.workers=2"], multirun=False, launcher_here=False)
    return cfg


def test_the_profile_covers_every_tensor_in_backward_order(mlp_job):
    profiled = profile_job(mlp_job)
    profile = profiled.profile
    assert profile.sizes == tuple(reversed(profiled.layer_sizes))
    assert sum(profile.sizes) == profiled.gradient.numel() == 17_226
    assert len(profile.forward) == len(profile.backward) == len(profile.sizes)
    assert all(t >= 0 for t in profile.forward + profile.backward)
    assert sum(profile.backward) > 0 and profile.update > 0
    assert profiled.gradient.abs().sum() > 0


def test_warming_up_trains_the_model_before_its_gradient_is_taken(mlp_job):
    fresh = profile_job(mlp_job).gradient
    assert torch.equal(profile_job(mlp_job).gradient, fresh)  # seeded: the same batches
    trained = profile_job(mlp_job, warmup_steps=1000).gradient
    # Only the optimizer steps can make them differ; 1000 of them fit the digits' training
    # set, so any batch's gradient is small (one batch's gradient is too noisy after fewer).
    assert not torch.equal(trained, fresh)
    assert trained.norm() < fresh.norm() / 2


def test_a_failing_probe_worker_is_reported_with_its_rank(mlp_job):
    broken = mlp_job.copy()
    broken.model._target_ = "gradsync.models.no_such_model.Model"
    with pytest.raises(MeasurementError, match=r"link probe rank \d failed: "):
        probe_links(broken, 2)


def test_the_link_probe_times_real_collectives_and_saved_measurements_are_reused(
    mlp_job, tmp_path, monkeypatch
):
    from gradsync.jobs.compose import compose_jobs
    from gradsync.measure import jobs

    first = jobs.Predictor()
    cluster = first.on_this_host(mlp_job, jobs.cluster_for(mlp_job))  # probes the links
    for calls in (cluster.call_s, cluster.overlapped_call_s, cluster.idle_call_s):
        assert set(calls) == {"all_reduce", "all_gather", "broadcast"}
        assert all(0 < seconds < 0.5 for seconds in calls.values())
    assert 0 <= cluster.sync_s < 0.5
    # One link here (loopback): computing while it carries 1 MiB transfers is slower or not.
    assert set(cluster.busy_link_slowdown) == {"link 1"}
    assert 1.0 <= cluster.busy_link_slowdown["link 1"] < 10
    assert probe_links(mlp_job, 1).calls == {}

    expected = first.estimate(mlp_job, scheduler="allreduce", compressor="none")
    store = tmp_path / "measured.json"
    first.save(store)

    def measured_again(*args, **kwargs):
        raise AssertionError("measured again")

    second = jobs.Predictor()
    second.load(store)
    with monkeypatch.context() as guard:
        guard.setattr(jobs, "profile_job", measured_again)
        guard.setattr(jobs, "probe_links", measured_again)
        assert second.estimate(mlp_job, scheduler="allreduce", compressor="none") == expected

        # Trace-driven: a run's slowest worker's compute replaces the modelled one (allreduce:
        # compute, then the exchange), and with it the wait for the slowest worker. Given the
        # modelled compute, only that wait goes; given three times it, the iteration is at
        # least the extra compute longer.
        def traced(compute_s: float, forward_s: float | None = None) -> float:
            return second.estimate(
                mlp_job,
                scheduler="allreduce",
                compressor="none",
                compute_s=compute_s,
                forward_s=forward_s,
            ).iteration

        modelled = second.compute_seconds(mlp_job)
        assert traced(modelled) == pytest.approx(expected.iteration - cluster.sync_s)
        assert traced(3 * modelled) - traced(modelled) >= 2 * modelled * (1 - 1e-9)
        # Nothing overlaps backward here: where the last forward ends changes nothing.
        assert traced(modelled, forward_s=modelled / 2) == pytest.approx(traced(modelled))
    # A compressor not measured before: its wire format is recorded on a fresh gradient, the
    # loaded timings stay.
    (topk,) = compose_jobs(
        ["model=mlp", "trainer.workers=2", "compressor=topk"], multirun=False, launcher_here=False
    )
    assert second.wire(topk, "topk", 2).density < 1.0
    assert second.profiled(topk).profile == first.profiled(mlp_job).profile
