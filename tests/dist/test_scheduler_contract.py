"""The contract every registered scheduler keeps, checked over the registry (a new entry is
covered with no edit here): built from its composed config as a worker builds it, it runs
two steps on real gloo ranks (with its parameter servers when it has them), every element of
every step's gradient leaves through the engine's one contract (``SyncComponents.exchange``),
once, and where its
entry says it trains as ``scheduler=allreduce`` does with ``compressor=none``, its parameters
equal the flat all-reduce's."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import DictConfig
from torch import nn

from gradsync import families
from gradsync.comm.collective import TorchCollective
from gradsync.config.instantiate import build
from gradsync.jobs.compose import CONFIG_MODULE
from gradsync.jobs.discovery import group_options
from gradsync.schedulers.engine.components import SyncComponents
from gradsync.schedulers.ps.groups import make_groups
from gradsync.schedulers.registry import SCHEDULERS, spec_of
from gradsync.train.build import build_optimizer, build_sync
from gradsync.train.servers import serve
from tests.helpers.dist import run_world

pytestmark = pytest.mark.dist

STEPS, WORKERS, SERVERS, BATCH = 2, 2, 1, 8
REFERENCE = "allreduce"
WITH_SERVERS = [n for n, s in SCHEDULERS.items() if s.capabilities.parameter_server]
WITHOUT_SERVERS = [n for n in SCHEDULERS if n not in WITH_SERVERS]


def _configs(names: list[str], *, group: str = "scheduler") -> dict[str, DictConfig]:
    """``{name: the composed config with group=name}``, dense unless ``group`` is compressor."""
    families.register()
    base = ["compressor=none", f"trainer.workers={WORKERS}", f"trainer.servers={SERVERS}"]
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        return {
            name: compose(
                config_name="train",
                overrides=[*base, f"{group}={name}", "trainer.lr=0.1", "trainer.momentum=0.9"],
            )
            for name in names
        }


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 4)).double()


def _batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 * step + rank)
    x = torch.randn(BATCH, 10, generator=gen, dtype=torch.float64)
    return x, torch.randint(0, 4, (BATCH,), generator=gen)


@dataclass
class Trained:
    params: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    """Each config's parameters after its steps."""
    exchanges: dict[str, list[int]] = field(default_factory=dict)
    """Each config's elements handed to ``SyncComponents.exchange`` in buckets, per step."""


def _count_exchanges() -> list[int]:
    """Counts the elements of every bucket given to the engine's ``exchange`` in this process
    from now on (the real method runs); the returned one-element list holds the count."""
    count = [0]
    exchange = SyncComponents.exchange

    def counted(self, bucket, *args, **kwargs):
        count[0] += bucket.gradient.numel()
        return exchange(self, bucket, *args, **kwargs)

    SyncComponents.exchange = counted  # type: ignore[method-assign]
    return count


def _train_each(rank: int, world_size: int, configs: dict[str, DictConfig]) -> Trained:
    """Every config of ``configs`` in turn, as the worker runs it; the servers (ranks from
    WORKERS on) serve only schedulers that have them."""
    workers = make_groups(WORKERS, timedelta(seconds=60))
    trained = Trained()
    count = _count_exchanges()
    for name, cfg in configs.items():
        model = _model()
        if rank >= WORKERS:
            if spec_of(cfg.scheduler).capabilities.parameter_server:
                serve(cfg, model, server=rank - WORKERS, steps_per_epoch=STEPS, total_steps=STEPS)
            continue
        optimizer = build_optimizer(cfg, model)
        collective = TorchCollective(group=workers, timeout=timedelta(seconds=60))
        sync = build_sync(cfg, collective=collective, clock=time.perf_counter)
        sync.attach(model, optimizer)
        trained.exchanges[name] = []
        for step in range(STEPS):
            before = count[0]
            sync.begin(step=step, epoch=0)
            x, y = _batch(step, rank)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            sync.step(step=step, epoch=0, loss=loss.detach())
            optimizer.zero_grad(set_to_none=True)
            trained.exchanges[name].append(count[0] - before)
        sync.flush()
        trained.params[name] = [p.detach().clone() for p in model.parameters()]
    return trained


def _check(
    results: list[Trained],
    names: list[str],
    equals_reference: Callable[[str], bool],
    reference: str = REFERENCE,
) -> None:
    """Every worker ran ``names`` after ``reference``, each of them moved the model, sent
    every step through the engine's contract, and those ``equals_reference`` picks ended where
    the reference did."""
    initial = [p.detach() for p in _model().parameters()]
    numel = sum(p.numel() for p in initial)
    for rank, result in enumerate(results[:WORKERS]):
        trained = result.params
        assert list(trained) == [reference, *names]
        for name in [reference, *names]:
            exchanged = result.exchanges[name]
            assert exchanged == [numel] * STEPS, f"{name} on rank {rank}: {exchanged} elements"
        for name in names:
            moved = any(not torch.equal(a, b) for a, b in zip(trained[name], initial, strict=True))
            assert moved, f"{name} did not train on rank {rank}"
            if equals_reference(name):
                _assert_same(trained[name], trained[reference], name)


def _assert_same(got: list[torch.Tensor], want: list[torch.Tensor], name: str) -> None:
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=name)


def test_every_scheduler_without_servers_trains_and_keeps_its_claims(tmp_path):
    names = [n for n in WITHOUT_SERVERS if n != REFERENCE]
    results = run_world(_train_each, WORKERS, tmp_path, _configs([REFERENCE, *names]), timeout=240)
    _check(results, names, _claims_allreduce)


@pytest.mark.parametrize("name", WITH_SERVERS)
def test_every_scheduler_with_servers_trains_and_keeps_its_claims(name, tmp_path):
    # A world each: a job runs one parameter-server protocol, and an asynchronous one may end
    # with replies nobody waits for.
    results = run_world(
        _train_each, WORKERS + SERVERS, tmp_path, _configs([REFERENCE, name]), timeout=240
    )
    _check(results, [name], _claims_allreduce)


def _claims_allreduce(name: str) -> bool:
    return SCHEDULERS[name].capabilities.equals_allreduce


def _lossless(name: str) -> bool:
    compressor = _configs([name], group="compressor")[name].compressor
    return bool(build(compressor, path="compressor").lossless)


def test_every_compressor_keeps_the_workers_in_step_under_the_flat_all_reduce(tmp_path):
    """Every compressor option (none first, the reference), with the error feedback its
    method asks for: after two steps every worker holds the same model (what one applies, all
    apply), and a lossless one trains exactly as none does. (A sparsifier may send nothing in
    two steps of a small model: threshold's residual has not reached its threshold yet.)"""
    names = [n for n in group_options()["compressor"] if n != "none"]
    configs = _configs(["none", *names], group="compressor")
    first, *others = (
        result.params for result in run_world(_train_each, WORKERS, tmp_path, configs, timeout=240)
    )
    assert list(first) == ["none", *names]
    for name in names:
        for other in others:
            _assert_same(other[name], first[name], name)
        if _lossless(name):
            _assert_same(first[name], first["none"], name)
