"""Staleness corrections on asp and ssp servers, on real ranks (gloo, point to point). Every
update a server applies is rebuilt from what the workers held and pushed: a gradient's staleness
τ (updates since its worker's pull) says which update applied it, and that update must equal the
formula of the correction asked for, with ``none`` exactly the uncorrected one. With one worker
nothing is ever stale, and every correction trains exactly as ``none`` does, which is plain SGD."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from gradsync.comm.collective import TorchCollective
from gradsync.compressors.options.base import NoneCompressorConfig
from gradsync.config.schema import TrainerConfig
from gradsync.feedback.options import NoneFeedbackConfig
from gradsync.schedulers.ps.config import AspConfig, SspConfig
from gradsync.schedulers.ps.groups import make_groups
from gradsync.train.build import build_sync
from gradsync.train.servers import serve
from tests.helpers.dist import run_world
from tests.helpers.training import local_loss, sgd, tiny_data, tiny_model

pytestmark = pytest.mark.dist

STEPS, LR, MOMENTUM, WEIGHT_DECAY = 8, 0.1, 0.9, 1e-3
LAMBDA = 2.0  # large, so that DC's term stands far above rounding on the tiny model
SLOW = 1  # this worker sleeps each step: the other's updates make its gradients stale
Setting = tuple[str, str]  # (scheduler, staleness_correction)
Record = tuple[Tensor, Tensor, int]  # a worker's step: parameters held, gradient, its τ


def _cfg(workers: int, setting: Setting) -> DictConfig:
    scheduler, correction = setting
    options: dict[str, Any] = {"staleness_correction": correction, "dc_lambda": LAMBDA}
    schema = AspConfig(**options) if scheduler == "asp" else SspConfig(staleness=1, **options)
    trainer = TrainerConfig(workers=workers, lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    return OmegaConf.create(
        {
            "trainer": OmegaConf.structured(trainer),
            "scheduler": OmegaConf.structured(schema),
            "compressor": OmegaConf.structured(NoneCompressorConfig()),
            "feedback": OmegaConf.structured(NoneFeedbackConfig()),
        }
    )


def _flat(tensors: list[Tensor]) -> Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def _each(rank: int, world_size: int, settings: list[Setting]) -> dict[Setting, Any]:
    """Every setting's run in turn, in one world (its processes start once)."""
    workers = world_size - 1
    group = make_groups(workers, timedelta(seconds=60))
    results = {}
    for setting in settings:
        results[setting] = _run(rank, group, _cfg(workers, setting))
        dist.barrier()  # no worker pushes into the next run while the server ends this one
    return results


def _run(rank: int, group: dist.ProcessGroup | None, cfg: DictConfig) -> Any:
    """The server's values after each update, or a worker's ``Record`` of each step."""
    workers = int(cfg.trainer.workers)
    model = tiny_model()
    if rank == workers:
        snapshots: list[Tensor] = []
        serve(cfg, model, server=0, steps_per_epoch=STEPS, total_steps=STEPS,
              after_step=lambda values: snapshots.append(values.clone()))  # fmt: skip
        return snapshots
    # Built from the config as a job builds it: the server's options pass the worker by.
    sync = build_sync(cfg, collective=TorchCollective(group=group), clock=time.perf_counter)
    optimizer = sgd(model)  # never stepped: the server steps
    sync.attach(model, optimizer)
    data = tiny_data(STEPS, workers)
    records: list[Record] = []
    for step in range(STEPS):
        if rank == SLOW and workers > 1:
            time.sleep(0.02)
        sync.begin(step=step)
        held = _flat(list(model.parameters()))
        local_loss(model, data, step, rank, workers).backward()
        gradient = _flat([p.grad for p in model.parameters() if p.grad is not None])
        stats = sync.step(step=step)
        optimizer.zero_grad(set_to_none=True)
        records.append((held, gradient, int(stats.extra["sched/applied_staleness"])))
    sync.close()
    return records


def _by_update(states: list[Tensor], workers: list[list[Record]], correction: str) -> list[Record]:
    """Each server update's gradient: pulled at the state a worker held, applied τ later. With
    ``predict`` a worker held the state it pulled extrapolated along the update before it, as
    far as its previous gradient was stale."""
    applied: dict[int, Record] = {}
    for records in workers:
        ahead = 0  # the staleness of this worker's previous gradient
        for record in records:
            held, _, staleness = record
            prediction = ahead if correction == "predict" else 0
            sent = [_sent(states, k, prediction) for k in range(len(states))]
            pulled = next(k for k, values in enumerate(sent) if torch.equal(values, held))
            assert pulled + staleness not in applied, "two gradients applied in one update"
            applied[pulled + staleness] = record
            ahead = staleness
    assert sorted(applied) == list(range(len(states) - 1)), "every update applies a gradient"
    return [applied[k] for k in range(len(states) - 1)]


def _sent(states: list[Tensor], k: int, ahead: int) -> Tensor:
    """What the server sends after update k, predicted ``ahead`` updates on (SpecTrain)."""
    if k == 0 or ahead == 0:
        return states[k]
    return states[k] + ahead * (states[k] - states[k - 1])


def _check_every_update(states: list[Tensor], records: list[Record], correction: str) -> float:
    """SGD with momentum and weight decay as the server steps it, η/N per push, with the
    correction's momentum or gradient; the largest change DC made (0 without DC)."""
    workers = 2
    buffer: Tensor | None = None
    largest = 0.0
    for k, (held, gradient, staleness) in enumerate(records):
        now = states[k]
        momentum = MOMENTUM
        if correction == "momentum":  # minus the implicit momentum τ/(τ+1)
            momentum = max(0.0, MOMENTUM - staleness / (staleness + 1))
        if correction == "dc":  # moved to the values now, with λ·g⊙g for the Hessian
            term = LAMBDA * gradient * gradient * (now - held)
            largest = max(largest, float(term.abs().max()))
            gradient = gradient + term
        step = gradient / workers + WEIGHT_DECAY * now
        buffer = step if buffer is None else momentum * buffer + step
        lr = LR / (staleness + 1) if correction == "lr" else LR
        expected = now - lr * buffer
        torch.testing.assert_close(states[k + 1], expected, rtol=0, atol=1e-12, msg=f"update {k}")
    return largest


STALE: list[Setting] = [
    ("asp", "none"),
    ("asp", "momentum"),
    ("asp", "dc"),
    ("ssp", "dc"),
    ("asp", "lr"),
    ("ssp", "predict"),
]


@pytest.fixture(scope="module")
def stale_runs(tmp_path_factory) -> dict[Setting, list[Any]]:
    ranks = run_world(_each, 3, tmp_path_factory.mktemp("stale"), STALE)
    return {setting: [rank[setting] for rank in ranks] for setting in STALE}


@pytest.mark.parametrize("setting", STALE, ids=lambda s: "-".join(s))
def test_each_stale_update_is_the_corrections_formula(stale_runs, setting):
    *workers, server = stale_runs[setting]
    initial = _flat(list(tiny_model().parameters()))
    states = [initial, *server]
    assert len(server) == 2 * STEPS
    records = _by_update(states, workers, setting[1])
    assert max(staleness for _, _, staleness in records) >= 2  # really stale gradients
    if setting[0] == "ssp":  # s = 1: the slow worker holds the other back
        assert max(staleness for _, _, staleness in records) <= 3
    largest = _check_every_update(states, records, setting[1])
    assert (largest > 1e-6) == (setting[1] == "dc")  # DC changed the gradients, far past atol
    predicted = sum(not any(torch.equal(held, s) for s in states) for held, _, _ in records)
    assert (predicted > 0) == (setting[1] == "predict")  # computed off the server's states


ZERO: list[Setting] = [
    ("asp", "none"),
    ("asp", "momentum"),
    ("asp", "dc"),
    ("asp", "lr"),
    ("asp", "predict"),
]


@pytest.fixture(scope="module")
def one_worker_runs(tmp_path_factory) -> dict[Setting, list[Any]]:
    ranks = run_world(_each, 2, tmp_path_factory.mktemp("fresh"), ZERO)
    return {setting: [rank[setting] for rank in ranks] for setting in ZERO}


def test_without_staleness_every_correction_is_none_and_none_is_sgd(one_worker_runs):
    none = one_worker_runs[("asp", "none")]
    for setting in ZERO:
        records, server = one_worker_runs[setting]
        assert [staleness for _, _, staleness in records] == [0] * STEPS
        assert len(server) == STEPS
        for step, (ours, ref) in enumerate(zip(server, none[1], strict=True)):
            assert torch.equal(ours, ref), f"{setting}: step {step}"
    model = tiny_model()  # the reference: one process, plain SGD with the same optimizer
    optimizer, data = sgd(model), tiny_data(STEPS, 1)
    for step in range(STEPS):
        local_loss(model, data, step, 0, 1).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.testing.assert_close(_flat(list(model.parameters())), none[1][step], rtol=0,
                                   atol=1e-12, msg=f"step {step}")  # fmt: skip
