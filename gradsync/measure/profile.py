"""A profile of the real model on this machine: per-tensor forward and backward seconds, sizes,
the optimizer's update time, and one real gradient (for measuring what compressors send).

The profile is taken in this process alone. Workers that share this host's cores (a
``runner=netem`` job) compute in lockstep and are slowed by that sharing, which the cost model
applies (``Cluster.compute_slowdown``): measuring under a stand-in load instead gave times
that moved by up to 45% between two profiles, and ran 20–40% slower than the job's own
compute, whose workers leave the cores free while they wait on the network.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from gradsync.cluster.ports import free_port
from gradsync.config.instantiate import build
from gradsync.data import loader_workers
from gradsync.families import streamed_from_disk
from gradsync.jobs.compose import ConfigError
from gradsync.launch import Loopback, PlacesRanksHere
from gradsync.measure import MeasurementError
from gradsync.projection.estimates import ModelProfile

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch
    from torch import Tensor, nn

    from gradsync.data.feeds import TrainFeed

PROFILE_STEPS, MAX_PROFILE_STEPS = 5, 50
PROFILE_S = 3.0
PROBE_TIMEOUT_S = 600  # a guard against a hung probe: ResNet-50's takes minutes


@dataclass(frozen=True)
class ProfiledJob:
    profile: ModelProfile
    gradient: Tensor | None
    """The flat gradient of one step, in model order (as compressors see it); None when the
    profile was read back from a file (``measured.py``)."""
    layer_shapes: tuple[tuple[int, ...], ...]
    """Its tensors' shapes, in model order (each one's size alone, as a 1-d shape, when read
    back from a file written before shapes were kept)."""

    @property
    def layer_sizes(self) -> tuple[int, ...]:
        return tuple(math.prod(shape) for shape in self.layer_shapes)


def training_step(cfg: DictConfig) -> tuple[nn.Module, Callable[[], Tensor], list[Tensor]]:
    model, loss, params, *_ = _job_parts(cfg)
    return model, loss, params


def _job_parts(
    cfg: DictConfig, device: torch.device | None = None
) -> tuple[
    nn.Module,
    Callable[[], Tensor],
    list[Tensor],
    Callable[[], tuple[Tensor, ...]],
    Callable[[tuple[Tensor, ...]], Tensor],
]:
    """The job's model, one step's loss on a real batch, its parameters, a function that loads
    the next batch as the training loop does, and the loss of such a batch; on ``device``
    (the CPU when None)."""
    import torch

    device = device or torch.device("cpu")
    from torch.utils.data import default_collate

    # Deferred for start-up: it imports torch, which this module's importers may not need.
    from gradsync.data.feeds import make_feeds
    from gradsync.tasks import build_task
    from gradsync.train.build import build_data, build_model

    torch.set_num_threads(int(cfg.trainer.threads_per_worker))
    torch.manual_seed(int(cfg.trainer.seed))
    data = build_data(cfg)
    model = build_model(cfg, data.spec).to(device)
    task = build_task(data.spec)
    batch_size = int(cfg.trainer.batch_size)
    collated = default_collate([data.train[i] for i in range(batch_size)])
    batch = tuple(part.to(device) for part in collated)
    params: list[Tensor] = [p for p in model.parameters() if p.requires_grad]
    # The training loop's own path (held in memory, or read in this process), as one worker.
    feeds = make_feeds(
        data,
        device=device,
        batch_size=batch_size,
        eval_batch_size=batch_size,
        rank=0,
        workers=1,
        seed=int(cfg.trainer.seed),
        loader_workers=0,
    )
    batches = _forever(feeds.train)
    return (
        model,
        lambda: task.loss(model, batch),
        params,
        lambda: next(batches),
        lambda loaded: task.loss(model, loaded),
    )


def _forever(feed: TrainFeed) -> Iterator[tuple[Tensor, ...]]:
    """The feed's batches, epoch after epoch."""
    for epoch in itertools.count():
        yield from feed.epoch(epoch, skip=0)


def _read_by_loader_processes(cfg: DictConfig) -> bool:
    """Whether the job's batches come from loader processes, off the training process: a
    dataset read from disk, with loader workers (under auto, as a worker on this host has)."""

    if not streamed_from_disk(cfg.dataset):
        return False
    t = cfg.trainer
    cpus = loader_workers.worker_cpus(os.environ, slurm_task=False, processes_here=int(t.workers))
    setting = str(t.loader_workers)
    return loader_workers.loader_workers(setting, cpus=cpus, threads=int(t.threads_per_worker)) > 0


@dataclass(frozen=True)
class SharedHostDelays:
    """What the cost model cannot derive on this host, measured with the job's own workers,
    steps and links (``link_probe.py``): the first collective after the compute waits for
    the last worker to finish its share of the cores (``sync``, once per iteration), and
    every collective call pays a fixed cost (``calls``: seconds of a one-element
    ``all_reduce``, ``all_gather`` and ``broadcast`` made right after some computing;
    ``overlapped_calls``: the same made back to back from a communication thread while
    training runs; ``idle_calls``: back to back once no worker computes). Bandwidth is left
    to the formulas: one-element messages carry none."""

    sync: float
    calls: dict[str, float]
    overlapped_calls: dict[str, float]
    busy_link_slowdown: dict[str, float]
    """How many times longer a training step takes while large transfers keep a set of
    links busy (``simulator.busy_links_key``)."""
    second_link_mu: float | None = None
    """How many times longer the second link takes to carry the same bytes, when there is one."""
    idle_calls: dict[str, float] = field(default_factory=dict)


def probe_links(cfg: DictConfig, workers: int) -> SharedHostDelays:
    """Run ``workers`` link probes on this host, placed as the job's runner places its workers
    (under runner=netem: in namespaces on links shaped like the job's), over loopback when the
    runner starts none here."""
    if workers < 2:
        return SharedHostDelays(sync=0.0, calls={}, overlapped_calls={}, busy_link_slowdown={})
    with tempfile.TemporaryDirectory() as scratch, ExitStack() as stack:
        config, out = Path(scratch) / "job.yaml", Path(scratch) / "result.json"
        config.write_text(OmegaConf.to_yaml(cfg, resolve=True))
        argv = [sys.executable, "-m", "gradsync.measure.link_probe", "--config", str(config)]
        argv += ["--out", str(out)]
        commands, envs = _probe_launch(cfg, workers, argv, stack)
        processes = [
            subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
            for command, env in zip(commands, envs, strict=True)
        ]
        _wait_for(processes)
        result = json.loads(out.read_text())
    return SharedHostDelays(**result)


def _probe_launch(
    cfg: DictConfig, workers: int, argv: list[str], stack: ExitStack
) -> tuple[list[list[str]], list[dict[str, str]]]:
    """Each rank's command and environment, placed by the job's runner (built from the config,
    as ``gradsync run`` builds it); what it builds for them lasts as long as ``stack``."""

    runner = build(cfg.runner, path="runner")
    here = isinstance(runner, PlacesRanksHere)
    placement = stack.enter_context(runner.placement(workers) if here else nullcontext(Loopback()))
    base = {**os.environ, "WORLD_SIZE": str(workers), "MASTER_PORT": str(free_port())}
    commands = [placement.command(r, argv) for r in range(workers)]
    envs = [{**base, **placement.env(r), "RANK": str(r)} for r in range(workers)]
    return commands, envs


def _wait_for(processes: list[subprocess.Popen[str]]) -> None:
    """All probes finish, or the first failure stops the others and is raised with its rank."""
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    try:
        while any(p.poll() is None for p in processes):
            failed = [(r, p) for r, p in enumerate(processes) if p.returncode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        for rank, process in enumerate(processes):
            if process.poll() is None or process.returncode != 0:
                error = "" if process.poll() is None else process.communicate()[1].strip()
                last = error.splitlines()[-1] if error else "did not finish in time"
                raise MeasurementError(f"link probe rank {rank} failed: {last}")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()


def _steps(model: nn.Module, loss: Callable[[], Tensor], clock: Callable[[], float]) -> int:
    """PROFILE_STEPS, or more for a fast model, up to about PROFILE_S of them."""
    # Deferred for start-up: it imports torch, which this module's importers may not need.
    from gradsync.schedulers.engine.profiling import samples_within

    start = clock()
    loss().backward()
    seconds = clock() - start
    model.zero_grad(set_to_none=True)
    return samples_within(seconds, PROFILE_S, least=PROFILE_STEPS, most=MAX_PROFILE_STEPS)


def device_name(cfg: DictConfig) -> str:
    """``trainer.device`` of a composed config (an enum) or of one read back (a string)."""
    value = OmegaConf.select(cfg, "trainer.device")
    return str(value.value if isinstance(value, Enum) else value or "cpu")


def _profile_device(cfg: DictConfig) -> torch.device:
    """The device the job trains on, which the profile is taken on; ConfigError when it is a
    GPU this host does not have."""
    import torch

    device = torch.device(device_name(cfg))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "trainer.device=cuda: this host has no CUDA device to profile on; profile on a GPU "
            "node with --measurements FILE.json and pass that file here, or profile on the CPU "
            "(trainer.device=cpu) and give the cluster's compute (--compute, --cluster)"
        )
    return device


def _flat_gradient(params: list[Tensor]) -> Tensor:
    """The step's gradients, flat in model order (as compressors see them)."""
    import torch

    grads = []
    for p in params:
        if p.grad is None:
            raise MeasurementError(f"a trained parameter of shape {tuple(p.shape)} got no gradient")
        grads.append(p.grad.reshape(-1))
    return torch.cat(grads).detach().clone()


def profile_job(cfg: DictConfig, *, warmup_steps: int = 0) -> ProfiledJob:
    """Profile the composed job's model at ``trainer.batch_size`` in this process, alone on
    the host, on ``trainer.device`` (a GPU's per-tensor times, each kernel waited for, when it
    is cuda). The gradient compressors are measured on is taken after ``warmup_steps`` of
    training with the job's optimizer: how many elements pass a threshold depends on how far
    training has come; it is kept on the CPU, where compressors are measured."""
    import torch

    # Deferred for start-up: it imports torch, which this module's importers may not need.
    from gradsync.schedulers.engine.profiling import median_seconds, profile_tensors
    from gradsync.train.build import build_optimizer
    from gradsync.train.timing import make_clock

    device = _profile_device(cfg)
    clock = make_clock(device)
    model, loss, params, load, loss_of = _job_parts(cfg, device)
    steps = _steps(model, loss, clock)
    forward, backward = profile_tensors(model, loss, steps=steps, clock=clock)
    trainer = build_optimizer(cfg, model)
    for _ in range(warmup_steps):
        trainer.zero_grad(set_to_none=True)
        loss_of(load()).backward()
        trainer.step()
    model.zero_grad(set_to_none=True)
    loss_of(load()).backward()
    gradient = _flat_gradient(params).cpu()
    # Loading is timed after the gradient is taken: its batches stay the same however many
    # steps the timing takes.
    prefetched = _read_by_loader_processes(cfg)
    data = 0.0 if prefetched else median_seconds(load, repeats=steps, clock=clock)
    optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    update = median_seconds(optimizer.step, repeats=steps, clock=clock)
    sizes = [p.numel() for p in params]
    profile = ModelProfile(
        model=type(model).__name__,
        sizes=tuple(sizes[::-1]),
        forward=tuple(forward),
        backward=tuple(backward),
        update=update,
        data=data,
        batch_size=int(cfg.trainer.batch_size),
        element_bytes=params[0].element_size() if params else 4,
    )
    shapes = tuple(tuple(p.shape) for p in params)
    return ProfiledJob(profile=profile, gradient=gradient, layer_shapes=shapes)
