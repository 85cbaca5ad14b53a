"""Every registered scheduler, with each compressor whose collectives differ and with fp16, for
a few steps over a process group that keeps NCCL's contract (``tests/helpers/nccl_double.py``:
no handle from a synchronous collective, tensors on the group's device, no any-source receive,
no two threads issuing on one communicator at once), built from its composed config as a
worker builds it; under fp16 one worker's gradients overflow in one step, which every worker
skips with its state as before.

On a GPU cluster each worker has its GPU and the workers talk NCCL; a job with parameter
servers keeps gloo for the default group the servers share, and NCCL among the workers. The
worlds here are built the same way. While the workers train, no error-feedback or compressor
``state_dict()`` is taken: that is for checkpoints, and goes through the host (state lives
where the model lives, and a re-plan moves it there). The jobs that failed on a GPU also run
through the whole worker (``run_worker``), every group of the job on the double."""

from __future__ import annotations

import json
import math
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torch import nn

from gradsync.comm.collective import TorchCollective
from gradsync.jobs.compose import ConfigError, compose_jobs
from gradsync.metrics.summary import METRICS_FILE
from gradsync.schedulers.ps.groups import make_groups
from gradsync.schedulers.registry import SCHEDULERS
from gradsync.train.build import build_optimizer, build_precision, build_sync
from gradsync.train.faults import FaultPlan
from gradsync.train.servers import serve
from tests.helpers import nccl_double
from tests.helpers.dist import NCCL_DOUBLE, run_world

COMPRESSORS: dict[str, tuple[str, ...]] = {
    "none": ("compressor=none",),
    "topk": ("compressor=topk",),
    "topk_union": ("compressor=topk", "compressor.exchange=union"),
    "terngrad": ("compressor=terngrad",),
    "powersgd": ("compressor=powersgd",),
    "deft": ("compressor=deft",),
    "dgc": ("compressor=dgc",),
}
FP16_COMPRESSORS = ("none", "topk", "topk_union", "terngrad", "powersgd", "dgc")
WORKERS, SERVERS, STEPS, BATCH, OVERFLOW_STEP = 2, 1, 5, 8, 2
TIMEOUT = timedelta(seconds=60)
WORLD_TIMEOUT_S = 400
WITH_SERVERS = [n for n, s in SCHEDULERS.items() if s.capabilities.parameter_server]
LOCKSTEP = [n for n in SCHEDULERS if n not in WITH_SERVERS]
REFUSAL = "scheduler="
"""What the one line refusing a scheduler's pairing with a compressor or a precision names."""


def _jobs(schedulers: list[str], servers: int) -> dict[str, DictConfig]:
    """``{"scheduler+compressor@precision": config}`` for every pair the checks let run; the
    planning schedulers profile one step, so that a few steps reach their re-plan."""
    pairs = [(c, "fp32") for c in COMPRESSORS] + [(c, "fp16") for c in FP16_COMPRESSORS]
    jobs: dict[str, DictConfig] = {}
    for scheduler in schedulers:
        for compressor, precision in pairs:
            overrides = [
                f"scheduler={scheduler}",
                *COMPRESSORS[compressor],
                f"trainer.precision={precision}",
                f"trainer.workers={WORKERS}",
                "trainer.lr=0.01",
                *([f"trainer.servers={servers}"] if servers else []),
            ]
            try:
                cfg = compose_jobs(overrides, multirun=False)[0]
            except ConfigError as refused:
                assert REFUSAL in str(refused), str(refused)
                continue
            if "profile_steps" in cfg.scheduler:
                cfg.scheduler.profile_steps = 1
            jobs[f"{scheduler}+{compressor}@{precision}"] = cfg
    return jobs


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4)
    )


def _batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(BATCH, 10, generator=gen), torch.randint(0, 4, (BATCH,), generator=gen)


@contextmanager
def _no_state_dict(*components: object) -> Iterator[None]:
    """``state_dict()`` of each component raises inside the block."""

    def refuse(*_: Any, **__: Any) -> dict[str, Any]:
        raise AssertionError("state_dict() taken while training (it is for checkpoints)")

    for component in components:
        component.state_dict = refuse  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for component in components:
            del component.state_dict  # type: ignore[attr-defined]


def _same(a: Any, b: Any) -> bool:
    """Equal to the bit, through dicts, sequences, tensors and numpy arrays."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _saved(sync: Any, model: nn.Module) -> tuple[Any, list[torch.Tensor]]:
    """What an fp16 step every worker skips must leave as it was (read between steps)."""
    return sync.components_state(), [p.detach().clone() for p in model.parameters()]


def _train(cfg: DictConfig, rank: int, group: Any) -> None:
    """A few steps as the training loop drives them; under fp16, rank 1's gradients overflow at
    OVERFLOW_STEP, and every worker skips it: error memory, compressor state and parameters as
    before it."""
    model = _model()
    optimizer = build_optimizer(cfg, model)
    precision = build_precision(cfg, torch.device("cpu"))
    overflows = precision.loss_scale is not None
    fault = FaultPlan(rank=rank, spec=f"1:{OVERFLOW_STEP}:inf" if overflows else "", slow_spec="")
    collective = TorchCollective(group=group, timeout=TIMEOUT)
    sync = build_sync(
        cfg, collective=collective, clock=time.perf_counter, loss_scale=precision.loss_scale
    )
    sync.attach(model, optimizer)
    components = [getattr(sync, "feedback", None), getattr(sync, "compressor", None)]
    before = None
    try:
        for step in range(STEPS):
            if overflows and step == OVERFLOW_STEP:
                before = _saved(sync, model)
            with _no_state_dict(*[c for c in components if c is not None]):
                sync.begin(step=step, epoch=0)
                x, y = _batch(step, rank)
                with precision.autocast():
                    loss = nn.functional.cross_entropy(model(x), y)
                precision.backward(fault.differentiated(loss, step))
                stats = sync.step(step=step, epoch=0, loss=loss.detach())
                optimizer.zero_grad(set_to_none=True)
                # The loop's metrics, through the scheduler's own order.
                norm = float(torch.as_tensor(stats.error_norm))
                sync.metrics_collective().reduce_metrics([norm], device=torch.device("cpu"))
            if before is not None and step == OVERFLOW_STEP:
                assert _same(_saved(sync, model), before), "the skipped step changed state"
        with _no_state_dict(*[c for c in components if c is not None]):
            sync.flush()
    finally:
        sync.close()
    assert all(torch.isfinite(p).all() for p in model.parameters())


def _train_each(
    rank: int, world_size: int, jobs: dict[str, DictConfig], servers: int
) -> dict[str, str]:
    """The jobs in turn on this rank: each name and "ok", up to the first that failed, with the
    last lines of its error (its peers then fail or time out in the collective it left)."""
    nccl_double.register()
    workers = make_groups(WORKERS, TIMEOUT, backend=nccl_double.BACKEND) if servers else None
    outcome = {}
    for name, cfg in jobs.items():
        try:
            if rank >= WORKERS:
                serve(
                    cfg, _model(), server=rank - WORKERS, steps_per_epoch=STEPS, total_steps=STEPS
                )
            else:
                _train(cfg, rank, workers)
        except Exception:
            outcome[name] = "".join(traceback.format_exc().splitlines(keepends=True)[-6:])
            break
        outcome[name] = "ok"
    return outcome


def _check(results: list[dict[str, str]], jobs: dict[str, DictConfig]) -> None:
    failed = {
        f"{name} (rank {rank})": error
        for rank, result in enumerate(results)
        for name, error in result.items()
        if error != "ok"
    }
    assert not failed, "\n".join(f"{name}:\n{error}" for name, error in failed.items())
    assert set(results[0]) == set(jobs)


def _covered(jobs: dict[str, DictConfig], schedulers: list[str]) -> None:
    """No refusal hid more than pairs that cannot run: every scheduler runs dense, every
    compressor runs with some scheduler, and fp16 with every scheduler that scales losses."""
    for scheduler in schedulers:
        assert f"{scheduler}+none@fp32" in jobs
        if SCHEDULERS[scheduler].capabilities.loss_scaling:
            assert f"{scheduler}+none@fp16" in jobs
    for compressor in COMPRESSORS:
        assert any(f"+{compressor}@fp32" in name for name in jobs), compressor


@pytest.mark.timeout(WORLD_TIMEOUT_S + 60)
def test_every_lockstep_scheduler_runs_on_nccls_contract(tmp_path):
    jobs = _jobs(LOCKSTEP, servers=0)
    _covered(jobs, LOCKSTEP)
    assert all(
        f"{name}+{c}@fp16" in jobs for name in ("allreduce", "lags") for c in FP16_COMPRESSORS
    )
    results = run_world(
        _train_each, WORKERS, tmp_path, jobs, 0, timeout=WORLD_TIMEOUT_S, device=NCCL_DOUBLE
    )
    _check(results, jobs)


@pytest.mark.timeout(WORLD_TIMEOUT_S + 60)
@pytest.mark.parametrize("scheduler", WITH_SERVERS)
def test_parameter_servers_run_beside_workers_on_nccls_contract(scheduler, tmp_path):
    # A world each: a job runs one parameter-server protocol, and an asynchronous one may end
    # with replies nobody waits for. The servers' default group is gloo, the workers' the double.
    jobs = _jobs([scheduler], servers=SERVERS)
    assert f"{scheduler}+none@fp32" in jobs
    results = run_world(
        _train_each, WORKERS + SERVERS, tmp_path, jobs, SERVERS, timeout=WORLD_TIMEOUT_S
    )
    _check(results[:WORKERS], jobs)


def _contract_and_collective(rank: int, world_size: int) -> dict[str, Any]:
    """What the double answers where NCCL differs from gloo, and what every call of
    ``TorchCollective`` gives over it."""
    seen: dict[str, Any] = {}
    tensor = torch.full((3,), float(rank + 1))
    seen["sync handle"] = dist.all_reduce(tensor)
    work = dist.all_reduce(tensor, async_op=True)
    seen["async handle"] = work is not None
    work.wait()
    for name, call in {
        "off device": lambda: dist.all_reduce(torch.ones(2, device="meta")),
        "not contiguous": lambda: dist.all_reduce(torch.ones(4, 4).t()),
        "any source": lambda: dist.irecv(torch.ones(1)),
    }.items():
        try:
            call()
            seen[name] = "accepted"
        except nccl_double.ContractBroken as refused:
            seen[name] = str(refused)
    collective = TorchCollective()
    payload = (torch.full((2,), float(rank)), torch.full((3,), 2.0 * rank))
    seen["all_reduce"] = [t.tolist() for t in collective.all_reduce(payload)]
    seen["all_reduce max"] = collective.all_reduce((torch.tensor([rank]),), op="max")[0].item()
    started = collective.start_all_reduce((torch.ones(2),))
    seen["start_all_reduce"] = started()[0].tolist()
    gathered = collective.all_gather((torch.arange(rank + 1.0),))
    seen["all_gather"] = [part[0].tolist() for part in gathered]
    seen["broadcast"] = collective.broadcast((torch.full((2,), float(rank)),), src=1)[0].tolist()
    if rank == 0:
        collective.send((torch.tensor([7.0]),), dst=1)
    else:
        got = torch.zeros(1)
        collective.recv((got,), src=0)
        seen["recv"] = got.item()
    collective.barrier()
    return seen


def test_the_double_keeps_nccls_contract_and_every_collective_runs_on_it(tmp_path):
    first, second = run_world(
        _contract_and_collective, WORKERS, tmp_path, timeout=120, device=NCCL_DOUBLE
    )
    assert first["sync handle"] is None and first["async handle"]
    assert "bound to cpu" in first["off device"]
    assert "contiguous" in first["not contiguous"]
    assert "any source" in first["any source"]
    for seen in (first, second):
        assert seen["all_reduce"] == [[1.0, 1.0], [2.0, 2.0, 2.0]]
        assert seen["all_reduce max"] == 1
        assert seen["start_all_reduce"] == [2.0, 2.0]
        assert seen["all_gather"] == [[0.0], [0.0, 1.0]]
        assert seen["broadcast"] == [1.0, 1.0]
    assert second["recv"] == 7.0


def _two_threads(rank: int, world_size: int) -> str:
    """Two threads issuing on one communicator at once: the second is refused."""
    import threading

    outcome: list[str] = []
    group = dist.group.WORLD
    assert isinstance(group, nccl_double.NcclContractGroup)
    holding = group._one_issuer()
    holding.__enter__()  # as a thread inside a collective holds it

    def other() -> None:
        try:
            dist.all_reduce(torch.ones(1))
            outcome.append("accepted")
        except nccl_double.ContractBroken as refused:
            outcome.append(str(refused))

    thread = threading.Thread(target=other, name="hook")
    thread.start()
    thread.join()
    holding.__exit__(None, None, None)
    return outcome[0]


def test_the_double_refuses_a_second_issuing_thread(tmp_path):
    outcomes = run_world(_two_threads, WORKERS, tmp_path, timeout=120, device=NCCL_DOUBLE)
    assert all("thread 'hook'" in outcome for outcome in outcomes), outcomes


def _worker_on_the_double(rank: int, world_size: int, cfg: DictConfig, run_dir: str) -> None:
    """The real worker (``run_worker``: data, model broadcast, the training loop with its
    metrics, evaluation and checkpoints) with every group of the job on the double."""
    from gradsync.cluster.backends import Backends
    from gradsync.cluster.env import DistEnv
    from gradsync.train import worker

    dist.destroy_process_group()  # the worker makes its own, as a launched one does
    worker.job_backends = lambda *_, **__: Backends(nccl_double.BACKEND, nccl_double.BACKEND)
    store = Path(run_dir) / "rendezvous"
    env = DistEnv(rank, world_size, rank, world_size, f"file://{store}", "test")
    worker.run_worker(cfg, env, Path(run_dir))


@pytest.mark.timeout(WORLD_TIMEOUT_S + 60)
@pytest.mark.parametrize(
    "overrides",
    [
        ["scheduler=lags", "compressor=terngrad"],
        ["scheduler=omgs", "scheduler.profile_steps=1", "compressor=dgc", "trainer.precision=fp16"],
        ["scheduler=deft", "compressor=deft"],
    ],
    ids=["lags-terngrad", "omgs-dgc-fp16", "deft-deft"],
)
def test_the_worker_runs_whole_on_nccls_contract(overrides, tmp_path):
    """What failed on the H200 (TernGrad under LAGS, DGC's memory and fp16, DeFT's re-plan),
    through the whole worker: the run logs finite losses and leaves a checkpoint."""
    cfg = compose_jobs(
        [*overrides, f"trainer.workers={WORKERS}", "trainer.max_steps=8",
         "trainer.log_every=4"],
        multirun=False,
    )[0]  # fmt: skip
    OmegaConf.resolve(cfg)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run_world(
        _worker_on_the_double, WORKERS, tmp_path / "world", cfg, str(run_dir),
        timeout=WORLD_TIMEOUT_S, device=NCCL_DOUBLE,
    )  # fmt: skip
    logged = [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines()]
    losses = [r["train/loss"] for r in logged if "train/loss" in r]
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses), logged
    assert (run_dir / "checkpoints" / "latest").is_file()
