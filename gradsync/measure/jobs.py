"""From a composed job config to a prediction: its cluster, its profile, its compressor's wire
format. Profiles and wire formats are measured once per model (and worker count) and reused."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from gradsync.cluster.rates import DEFAULT_RATE, bits_per_s
from gradsync.config.instantiate import build
from gradsync.families import runner_schema
from gradsync.measure import measured
from gradsync.measure.kept import Kept, KeptProfiles, model_option, say_stale, stale
from gradsync.measure.planning import fits_here, planning_fit
from gradsync.measure.profile import ProfiledJob, device_name, probe_links, profile_job
from gradsync.measure.progress import Progress
from gradsync.measure.wire import MAX_RECORDED_WORLD, extrapolate, measure_wire
from gradsync.projection.cluster import LAN_LATENCY_S, Cluster
from gradsync.projection.estimates import Estimate, Job, ModelProfile, Wire
from gradsync.projection.machine import Compute
from gradsync.projection.selection import SelectionCost
from gradsync.schedulers.costs import predict


def cluster_for(cfg: DictConfig) -> Cluster:
    """The cluster a job runs on (composed, or read back from a run): its workers and servers,
    ``runner.bandwidth`` (``DEFAULT_RATE`` when the runner has none),
    ``runner.second_bandwidth``, and this host's cores when the runner starts every process
    here (its schema's ``starts_processes_here``)."""
    bandwidth = str(OmegaConf.select(cfg, "runner.bandwidth") or DEFAULT_RATE)
    second = OmegaConf.select(cfg, "runner.second_bandwidth")
    same_host = runner_schema(cfg).starts_processes_here
    return Cluster(
        workers=int(cfg.trainer.workers),
        bandwidth_bps=bits_per_s(bandwidth),
        latency_s=LAN_LATENCY_S,
        servers=int(OmegaConf.select(cfg, "trainer.servers") or 1),
        second_bandwidth_bps=bits_per_s(str(second), name="second_bandwidth") if second else None,
        shared_host_cores=os.cpu_count() if same_host else None,
        threads_per_worker=int(cfg.trainer.threads_per_worker),
    )


@dataclass
class Predictor:
    """Predictions for composed jobs, measuring each model and compressor only once."""

    warmup_steps: int = 0
    """Training steps before the gradient compressors are measured on is taken."""
    compute_scale: float = 1.0
    """Every measured compute time is multiplied by this (another machine's speed)."""
    compute: Compute | None = None
    """The compute of a described cluster's machines, in place of ``compute_scale``."""
    selection: Mapping[str, SelectionCost] = field(default_factory=dict)
    """Compression cost on a described cluster's machines, by compressor option: replaces the
    time measured here."""
    plans_here: bool = True
    """Whether a scheduler that fits its cost model on this host's shaped links is replayed
    here to learn its plan (``planning.py``); False for a described cluster, where it plans
    with the cluster's costs."""
    kept: KeptProfiles | None = None
    """Measurements kept in the package (``kept.py``), taken for the jobs they are of instead
    of measuring them; None: everything is measured here."""
    progress: Progress | None = None
    """Says what is measured here as it is (None: nothing is said)."""
    _measured: measured.Measurements = field(default_factory=measured.Measurements)
    _kept_taken: dict[str, Kept] = field(default_factory=dict)
    _kept_seen: set[str] = field(default_factory=set)

    def save(self, path: Path) -> None:
        """Everything measured so far, for ``load`` to start from later (``measured.py``)."""
        measured.write(path, self._measured)

    def load(self, path: Path) -> None:
        """Take the measurements ``save`` wrote instead of measuring them again."""
        self._measured.update(measured.read(path))

    def kept_for(self, cfg: DictConfig) -> Kept | None:
        """The kept measurements ``cfg``'s predictions start from, if they do."""
        self._take_kept(cfg)
        return self._kept_taken.get(profile_key(cfg))

    def _take_kept(self, cfg: DictConfig) -> None:
        """Start from the kept measurements of ``cfg``'s job, once: when there are some,
        nothing was measured or loaded for it, and its model still has the tensors they were
        measured on (else one line says it is measured again)."""
        key = profile_key(cfg)
        if self.kept is None or key in self._kept_seen or key in self._measured.profiles:
            return
        self._kept_seen.add(key)
        found = self.kept.of(key)
        if found is None:
            return
        why = stale(cfg, found.measurements.profiles[key].layer_shapes)
        if why is not None:
            say_stale(cfg, why)
            return
        self._measured.profiles[key] = found.measurements.profiles[key]
        wires = {k: w for k, w in found.measurements.wires.items() if k[0] == key}
        self._measured.wires.update(wires)
        self._kept_taken[key] = found

    @contextmanager
    def _measuring(self, what: str) -> Iterator[None]:
        """``what`` is measured here now: said on the progress bar, when there is one."""
        if self.progress is None:
            yield
            return
        with self.progress.doing(what):
            yield

    def _profile(self, cfg: DictConfig, why: str = "") -> ProfiledJob:
        batch = int(cfg.trainer.batch_size)
        with self._measuring(
            f"profiling model={model_option(cfg)} at batch {batch} on {device_name(cfg)}{why}"
        ):
            return profile_job(cfg, warmup_steps=self.warmup_steps)

    def profiled(self, cfg: DictConfig) -> ProfiledJob:
        key = profile_key(cfg)
        self._take_kept(cfg)
        if key not in self._measured.profiles:
            self._measured.profiles[key] = self._profile(cfg)
        return self._measured.profiles[key]

    def _gradient(self, cfg: DictConfig) -> ProfiledJob:
        """The profile of ``cfg``'s model with its gradient, taken afresh when it was loaded
        without one (its timings stay those loaded)."""
        profiled = self.profiled(cfg)
        if profiled.gradient is None:
            fresh = self._profile(cfg, ", for a gradient")
            profiled = replace(profiled, gradient=fresh.gradient, layer_shapes=fresh.layer_shapes)
            self._measured.profiles[profile_key(cfg)] = profiled
        return profiled

    def wire(self, cfg: DictConfig, compressor: str, workers: int) -> Wire:
        """What ``compressor`` sends among ``workers``: recorded among that many, or beyond
        MAX_RECORDED_WORLD extrapolated from half that world and that world."""
        if workers <= MAX_RECORDED_WORLD:
            return self._recorded_wire(cfg, compressor, workers)
        smaller = self._recorded_wire(cfg, compressor, MAX_RECORDED_WORLD // 2)
        larger = self._recorded_wire(cfg, compressor, MAX_RECORDED_WORLD)
        element_bytes = self.profiled(cfg).profile.element_bytes
        return extrapolate(smaller, larger, workers, element_bytes)

    def _recorded_wire(self, cfg: DictConfig, compressor: str, workers: int) -> Wire:

        method = OmegaConf.to_yaml(cfg.compressor) + str(cfg.feedback)
        key = (profile_key(cfg), method, workers)
        instance = build(cfg.compressor, path="compressor")
        self._take_kept(cfg)
        if key not in self._measured.wires:
            profiled = self._gradient(cfg)
            assert profiled.gradient is not None  # _gradient takes one where the profile has none
            feedback = build(cfg.feedback, path="feedback", compressor=instance)
            with self._measuring(f"what compressor={compressor} sends among {workers} workers"):
                self._measured.wires[key] = measure_wire(
                    compressor,
                    instance,
                    feedback,
                    profiled.gradient,
                    profiled.layer_shapes,
                    workers=max(workers, 1),
                )
        return replace(self._measured.wires[key], selects_alone=instance.selects_alone)

    def on_this_host(self, cfg: DictConfig, cluster: Cluster) -> Cluster:
        """``cluster`` with the delays of sharing this host's cores, when its workers do."""
        if cluster.shared_host_cores is None:
            return cluster
        key = (profile_key(cfg), OmegaConf.to_yaml(cfg.runner), cluster.workers)
        if key not in self._measured.delays:
            with self._measuring(f"probing the links among {cluster.workers} workers here"):
                self._measured.delays[key] = probe_links(cfg, cluster.workers)
        delays = self._measured.delays[key]
        return replace(
            cluster,
            call_s=delays.calls,
            overlapped_call_s=delays.overlapped_calls,
            idle_call_s=delays.idle_calls,
            sync_s=delays.sync,
            busy_link_slowdown=delays.busy_link_slowdown,
            second_link_mu=delays.second_link_mu,
        )

    def planning_fit(self, cfg: DictConfig, scheduler: str) -> dict[str, float]:
        """The cost model ``scheduler`` will plan with when it fits one on this host's shaped
        links (``planning.py``); empty when it plans with the cluster's own costs."""

        if not fits_here(scheduler, cfg):
            return {}
        key = (
            profile_key(cfg),
            OmegaConf.to_yaml(cfg.compressor),
            OmegaConf.to_yaml(cfg.runner),
            int(cfg.trainer.workers),
            int(cfg.scheduler.profile_steps),
        )
        if key not in self._measured.fits:
            with self._measuring(f"replaying scheduler={scheduler}'s planning here"):
                self._measured.fits[key] = planning_fit(cfg, scheduler)
        return self._measured.fits[key]

    def _decisions(self, cfg: DictConfig, scheduler: str) -> dict[str, float]:
        return self.planning_fit(cfg, scheduler) if self.plans_here else {}

    def machine_profile(self, cfg: DictConfig) -> tuple[ModelProfile, float]:
        """``cfg``'s profile on the cluster's machines, before any sharing of a host's cores,
        and how many times longer than here they compute (for what else was measured here)."""
        profile = self.profiled(cfg).profile
        if self.compute is None:
            return profile.scaled(self.compute_scale), self.compute_scale
        return self.compute.applied(profile)

    def compute_seconds(self, cfg: DictConfig, cluster: Cluster | None = None) -> float:
        """Forward + backward of one iteration as every estimate starts from: on the
        cluster's machines, slowed as the cluster's sharing of the cores says."""
        sharing = (cluster or cluster_for(cfg)).compute_slowdown
        profile = self.machine_profile(cfg)[0].scaled(sharing)
        return sum(profile.forward) + sum(profile.backward)

    def estimate(
        self,
        cfg: DictConfig,
        *,
        scheduler: str,
        compressor: str,
        cluster: Cluster | None = None,
        decisions: Mapping[str, float] | None = None,
        compute_s: float | None = None,
        forward_s: float | None = None,
        mean_compute_s: float | None = None,
        logged_plan: object | None = None,
    ) -> Estimate:
        """``decisions``: what the job decided from its own measurements, when known (a run's
        log, ``planning.logged_decisions``); else OMGS's fit on shaped links is taken by
        running its planning steps here. ``logged_plan``: what the scheduler planned from in
        the job (``planning.logged_plan``: DeFT's buckets and their times), when known.

        ``compute_s``: the slowest worker's forward + backward per iteration of the predicted
        run (``time/compute_max``), for a trace-driven prediction (the DeFT and OMGS papers'
        simulators take their layers' times from the training job itself): the profile is
        scaled to it, instead of slowed by the model of the workers' sharing of the cores.
        Busy links slow it no further and no wait for the slowest worker is added: the run's
        own compute includes both, and every exchange waits for the slowest worker.
        ``forward_s``: with ``compute_s``, the slowest worker's forward (``time/forward_max``):
        exchanges started when forward ends wait for the last worker to end it, and backward's
        gradients are ready in what is left of ``compute_s`` (on a shared host one worker may
        finish its forward long before another: the cores serve them in turn).
        ``mean_compute_s``: the same of the mean worker (``time/forward`` + ``time/backward``):
        once it has finished, the cores are mostly idle, and calls are priced so."""
        cluster = self.on_this_host(cfg, cluster or cluster_for(cfg))
        machine, machine_factor = self.machine_profile(cfg)
        slower = cluster.compute_slowdown
        busy_share = 1.0
        if compute_s is not None:
            slower = compute_s / self.compute_seconds(cfg, cluster) * slower
            cluster = replace(cluster, busy_link_slowdown={}, sync_s=0.0)
            if mean_compute_s is not None:
                busy_share = min(1.0, mean_compute_s / compute_s)
        profile = machine.scaled(slower)
        if compute_s is not None and forward_s is not None:
            profile = profile.with_passes(forward_s, max(compute_s - forward_s, 0.0))
        job = Job(
            profile=profile,
            cluster=cluster,
            wire=self.wire(cfg, compressor, cluster.workers)
            .scaled(machine_factor * slower, alone=machine_factor)
            .with_selection(self.selection.get(compressor)),
            scheduler=cfg.scheduler,
            decisions=self._decisions(cfg, scheduler) if decisions is None else decisions,
            logged_plan=logged_plan,
            cores_busy_share=busy_share,
        )
        return predict(scheduler, job)


def profile_key(cfg: DictConfig) -> str:
    """What the profile depends on: model, data, batch, threads, and the device when it is not
    the CPU (profiles made before devices were keyed were all the CPU's)."""
    parts = {key: OmegaConf.to_container(cfg[key], resolve=True) for key in ("model", "dataset")}
    device = device_name(cfg)
    on = [device] if device != "cpu" else []
    parts["trainer"] = [cfg.trainer.batch_size, cfg.trainer.threads_per_worker, *on]
    return OmegaConf.to_yaml(OmegaConf.create(parts))
