"""A worker of ps_bsp and of osp reuses the memory of its exchange with the server, on real
ranks (gloo; one worker, one server). Every tensor it hands to the server's link is recorded
(and kept, so that no freed memory is handed out again): a buffer may be replaced only by a
larger one (they grow to the largest message, never shrink or churn). On the CPU nothing is
staged, so ps_bsp pushes each step from the same memory, receives into the same memory, and
its training thread allocates no model-sized tensor after the first step."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from gradsync.comm.collective import TorchCollective
from gradsync.compressors.options.base import NoneCompressorConfig
from gradsync.config.schema import TrainerConfig
from gradsync.feedback.options import NoneFeedbackConfig
from gradsync.schedulers.ps.config import OspConfig, PsBspConfig
from gradsync.schedulers.ps.groups import make_groups
from gradsync.schedulers.ps.layout import PULL, PUSH
from gradsync.train.build import build_sync
from gradsync.train.servers import serve
from tests.helpers.allocations import LargeAllocations
from tests.helpers.dist import run_world
from tests.helpers.training import local_loss, sgd, tiny_data, tiny_model

pytestmark = pytest.mark.dist

STEPS = 6
JOBS = {"ps_bsp": PsBspConfig(), "osp": OspConfig(budget=0.5)}  # osp: ICS from step 1
CONTEXT, PAYLOAD = PUSH + 10, PUSH + 20  # the tags of a ps_bsp push's parts (messages.py)
Seen = tuple[str, int, int, int]  # operation, tag, storage, elements


def _cfg(name: str) -> DictConfig:
    return OmegaConf.create(
        {
            "trainer": OmegaConf.structured(TrainerConfig(workers=1, lr=0.1)),
            "scheduler": OmegaConf.structured(JOBS[name]),
            "compressor": OmegaConf.structured(NoneCompressorConfig()),
            "feedback": OmegaConf.structured(NoneFeedbackConfig()),
        }
    )


def _recorded(name: str, real: Callable[..., Any], kept: list[tuple[str, int, Tensor]]) -> Any:
    @functools.wraps(real)
    def recorded(self: TorchCollective, payload: Any, *args: Any, **kwargs: Any) -> Any:
        kept.extend((name, kwargs.get("tag", 0), tensor) for tensor in payload)
        return real(self, payload, *args, **kwargs)

    return recorded


def _each(rank: int, world_size: int) -> dict[str, Any]:
    group = make_groups(1, timedelta(seconds=60))
    kept: list[tuple[str, int, Tensor]] = []
    if rank == 0:  # the worker's point-to-point calls, whichever thread makes them
        for name in ("send", "recv", "start_send", "start_recv"):
            setattr(TorchCollective, name, _recorded(name, getattr(TorchCollective, name), kept))
    results = {}
    for name in JOBS:
        results[name] = _run(rank, group, _cfg(name), kept)
        kept.clear()
        dist.barrier()  # no worker pushes into the next run while the server ends this one
    return results


def _run(
    rank: int, group: dist.ProcessGroup | None, cfg: DictConfig, kept: list[tuple[str, int, Tensor]]
) -> Any:
    """A worker's calls of each step and the model-sized tensors its training thread made."""
    model = tiny_model()
    if rank == 1:
        serve(cfg, model, server=0, steps_per_epoch=STEPS, total_steps=STEPS)
        return None
    sync = build_sync(cfg, collective=TorchCollective(group=group), clock=time.perf_counter)
    optimizer = sgd(model)  # never stepped: the server steps
    sync.attach(model, optimizer)
    data = tiny_data(STEPS, 1)
    numel = sum(p.numel() for p in model.parameters())
    steps: list[tuple[list[Seen], list[str]]] = []
    for step in range(STEPS):
        sync.begin(step=step)
        local_loss(model, data, step, 0, 1).backward()
        first = len(kept)
        with LargeAllocations(numel * 8) as made:
            sync.step(step=step)
            sync.flush()  # the background exchange landed: its calls were made
        seen = [
            (name, tag, t.untyped_storage().data_ptr(), t.numel()) for name, tag, t in kept[first:]
        ]
        steps.append((seen, made.ops))
        optimizer.zero_grad(set_to_none=True)
    sync.close()
    return steps


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, list[tuple[list[Seen], list[str]]]]:
    worker, _ = run_world(_each, 2, tmp_path_factory.mktemp("buffers"))
    return worker


def _by_kind(steps: list[tuple[list[Seen], list[str]]]) -> dict[tuple[str, int], list[Seen]]:
    """Each kind of call (operation, tag) in order, but a push's length and pickled context (a
    few bytes, made anew)."""
    kinds: dict[tuple[str, int], list[Seen]] = {}
    for seen, _ in steps:
        for call in seen:
            if call[3] > 1 and call[1] != CONTEXT:
                kinds.setdefault(call[:2], []).append(call)
    return kinds


def _only_grows(calls: list[Seen]) -> bool:
    """Each call's memory is the previous call's, unless it needs more than any call before."""
    for k in range(1, len(calls)):
        if calls[k][2] != calls[k - 1][2] and calls[k][3] <= max(c[3] for c in calls[:k]):
            return False
    return True


@pytest.mark.parametrize("name", list(JOBS))
def test_every_exchange_reuses_the_workers_buffers(runs, name):
    kinds = _by_kind(runs[name])
    assert kinds, "the worker talked to its server"
    for kind, calls in kinds.items():
        assert len(calls) >= STEPS - 1, kind  # ICS from step 1
        assert _only_grows(calls), (kind, calls)


def test_ps_bsp_on_the_cpu_exchanges_from_the_same_memory_and_allocates_nothing(runs):
    kinds = _by_kind(runs["ps_bsp"])
    for kind in [("send", PAYLOAD), ("recv", PULL)]:
        assert len({storage for _, _, storage, _ in kinds[kind]}) == 1, kind
    made = [ops for _, ops in runs["ps_bsp"]]
    assert made[1:] == [[]] * (STEPS - 1), made
