"""From a composed job config to a prediction: its cluster, its profile, its compressor's wire
format. Profiles and wire formats are measured once per model (and process count) and reused."""

from __future__ import annotations

import os
from contextlib import ExitStack
from dataclasses import dataclass, field, replace

from omegaconf import DictConfig, OmegaConf

from gradsync.projection.cluster import LAN_LATENCY_S, Cluster
from gradsync.projection.predict import Estimate, Job, predict
from gradsync.projection.profile import (
    ProfiledJob,
    SharedHostDelays,
    others_computing,
    probe_links,
    profile_job,
)
from gradsync.projection.wire import MAX_RECORDED_WORLD, Wire, extrapolate, measure_wire

DEFAULT_BANDWIDTH = "1gbit"
# Runners that start every process of a job on this machine.
SAME_HOST_RUNNERS = ("runners.local.LocalRunner", "runners.netem.NetemRunner")


def bits_per_s(rate: str, *, name: str = "bandwidth") -> float:
    """A tc-style rate (``100mbit``, ``1gbit``) in bits per second; ValueError names ``name``."""
    from runners.testbed import rate_mbit

    return rate_mbit(rate, name=name) * 1e6


def cluster_for(cfg: DictConfig) -> Cluster:
    """The cluster a composed job runs on: its workers and servers, ``runner.bandwidth`` (1gbit
    when the runner has none), ``runner.second_bandwidth``, and this host's cores when the
    runner starts every process here."""
    bandwidth = str(OmegaConf.select(cfg, "runner.bandwidth") or DEFAULT_BANDWIDTH)
    second = OmegaConf.select(cfg, "runner.second_bandwidth")
    same_host = str(OmegaConf.select(cfg, "runner._target_")) in SAME_HOST_RUNNERS
    return Cluster(
        workers=int(cfg.trainer.workers),
        bandwidth_bps=bits_per_s(bandwidth),
        latency_s=LAN_LATENCY_S,
        servers=int(OmegaConf.select(cfg, "trainer.servers") or 1),
        second_bandwidth_bps=bits_per_s(str(second), name="second_bandwidth") if second else None,
        shared_host_cores=os.cpu_count() if same_host else None,
    )


def processes_of(cfg: DictConfig, cluster: Cluster) -> int:
    """Processes that compute at once on one host: every worker when they share it (servers
    only apply updates, so they are not counted)."""
    return 1 if cluster.shared_host_cores is None else cluster.workers


@dataclass
class Predictor:
    """Predictions for composed jobs, measuring each model and compressor only once. On a
    shared host, the profile and the compressors are measured while as many other processes
    compute the job's steps (they run from the first measurement of a model until the next
    model's, or ``close``): use it in a ``with`` block."""

    warmup_steps: int = 0
    """Training steps before the gradient compressors are measured on is taken."""
    compute_scale: float = 1.0
    """Every measured compute time is multiplied by this (another machine's speed)."""
    _profiles: dict[tuple[str, int], ProfiledJob] = field(default_factory=dict)
    _wires: dict[tuple[str, str, int, int], Wire] = field(default_factory=dict)
    _delays: dict[tuple[str, int], SharedHostDelays] = field(default_factory=dict)
    _load: ExitStack = field(default_factory=ExitStack)
    _load_key: tuple[str, int] | None = None

    def __enter__(self) -> Predictor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._load.close()
        self._load_key = None

    def _loaded(self, cfg: DictConfig, processes: int) -> None:
        """Others compute this model's steps from now on (the job's other workers)."""
        key = (_model_key(cfg), processes)
        if self._load_key != key:
            self.close()
            if processes > 1:
                self._load.enter_context(others_computing(cfg, processes - 1))
            self._load_key = key

    def profiled(self, cfg: DictConfig, processes: int) -> ProfiledJob:
        key = (_model_key(cfg), processes)
        if key not in self._profiles:
            self._loaded(cfg, processes)
            self._profiles[key] = profile_job(
                cfg, processes=processes, warmup_steps=self.warmup_steps
            )
        return self._profiles[key]

    def wire(self, cfg: DictConfig, compressor: str, processes: int, workers: int) -> Wire:
        """What ``compressor`` sends among ``workers``: recorded among that many, or beyond
        MAX_RECORDED_WORLD extrapolated from half that world and that world."""
        if workers <= MAX_RECORDED_WORLD:
            return self._recorded_wire(cfg, compressor, processes, workers)
        smaller = self._recorded_wire(cfg, compressor, processes, MAX_RECORDED_WORLD // 2)
        larger = self._recorded_wire(cfg, compressor, processes, MAX_RECORDED_WORLD)
        element_bytes = self.profiled(cfg, processes).profile.element_bytes
        return extrapolate(smaller, larger, workers, element_bytes)

    def _recorded_wire(
        self, cfg: DictConfig, compressor: str, processes: int, workers: int
    ) -> Wire:
        from gradsync.config.instantiate import build

        method = OmegaConf.to_yaml(cfg.compressor) + str(cfg.feedback)
        key = (_model_key(cfg), method, processes, workers)
        if key not in self._wires:
            profiled = self.profiled(cfg, processes)
            self._loaded(cfg, processes)
            instance = build(cfg.compressor, path="compressor")
            feedback = build(cfg.feedback, path="feedback", compressor=instance)
            self._wires[key] = measure_wire(
                compressor,
                instance,
                feedback,
                profiled.gradient,
                profiled.layer_sizes,
                workers=max(workers, 1),
            )
        return self._wires[key]

    def on_this_host(self, cfg: DictConfig, cluster: Cluster) -> Cluster:
        """``cluster`` with the delays of sharing this host's cores, when its workers do."""
        if cluster.shared_host_cores is None:
            return cluster
        key = (_model_key(cfg), cluster.workers)
        if key not in self._delays:
            self.close()  # the probe's workers are the load
            self._delays[key] = probe_links(cfg, cluster.workers)
        delays = self._delays[key]
        return replace(cluster, call_s=delays.calls, sync_s=delays.sync)

    def estimate(
        self, cfg: DictConfig, *, scheduler: str, compressor: str, cluster: Cluster | None = None
    ) -> Estimate:
        cluster = self.on_this_host(cfg, cluster or cluster_for(cfg))
        processes = processes_of(cfg, cluster)
        job = Job(
            profile=self.profiled(cfg, processes).profile.scaled(self.compute_scale),
            cluster=cluster,
            wire=self.wire(cfg, compressor, processes, cluster.workers).scaled(self.compute_scale),
            scheduler=cfg.scheduler,
        )
        return predict(scheduler, job)


def _model_key(cfg: DictConfig) -> str:
    """What the profile depends on: model, data, batch, threads."""
    parts = {key: OmegaConf.to_container(cfg[key], resolve=True) for key in ("model", "dataset")}
    parts["trainer"] = [cfg.trainer.batch_size, cfg.trainer.threads_per_worker]
    return OmegaConf.to_yaml(OmegaConf.create(parts))
