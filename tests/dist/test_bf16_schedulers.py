"""bf16 with every scheduler that runs no servers (those with servers are run end to end in
``tests/integration/test_precision_runs.py``): built from its composed config as a worker builds
it, trained under CPU autocast on real gloo ranks. Some work inside the forward pass (updates
applied as each module starts, sends started when it ends), so under autocast too; where the
registry says a scheduler trains as the flat all-reduce does, it must still do so: the forward
pass is the same, so are the gradients."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import torch
from omegaconf import DictConfig
from torch import nn

from gradsync.comm.collective import TorchCollective
from gradsync.schedulers.ps.groups import make_groups
from gradsync.schedulers.registry import SCHEDULERS
from gradsync.train.build import build_optimizer, build_precision, build_sync
from tests.dist.test_scheduler_contract import REFERENCE, WITHOUT_SERVERS, WORKERS, _configs
from tests.helpers.dist import run_world
from tests.helpers.training import local_loss, tiny_data

pytestmark = pytest.mark.dist

STEPS = 2


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 4))


def _train_each(
    rank: int, world_size: int, configs: dict[str, DictConfig]
) -> dict[str, list[torch.Tensor]]:
    workers = make_groups(WORKERS, timedelta(seconds=60))
    x, y = tiny_data(STEPS, WORKERS)
    data = (x.float(), y)
    trained = {}
    for name, cfg in configs.items():
        model = _model()
        optimizer = build_optimizer(cfg, model)
        precision = build_precision(cfg, torch.device("cpu"))
        collective = TorchCollective(group=workers, timeout=timedelta(seconds=60))
        sync = build_sync(cfg, collective=collective, clock=time.perf_counter)
        sync.attach(model, optimizer)
        for step in range(STEPS):
            sync.begin(step=step, epoch=0)
            with precision.autocast():
                loss = local_loss(model, data, step, rank, world_size)
            precision.backward(loss)
            sync.step(step=step, epoch=0, loss=loss.detach())
            optimizer.zero_grad(set_to_none=True)
        sync.flush()
        sync.close()
        trained[name] = [p.detach().clone() for p in model.parameters()]
    return trained


def test_every_scheduler_without_servers_trains_under_bf16(tmp_path):
    names = [n for n in WITHOUT_SERVERS if n != REFERENCE]
    configs = _configs([REFERENCE, *names])
    for cfg in configs.values():
        cfg.trainer.precision = "bf16"
    results = run_world(_train_each, WORKERS, tmp_path, configs, timeout=240)
    initial = [p.detach() for p in _model().parameters()]
    for trained in results:
        for name, params in trained.items():
            assert all(torch.isfinite(p).all() for p in params), name
            assert all(not torch.equal(a, b) for a, b in zip(params, initial, strict=True)), name
            if SCHEDULERS[name].capabilities.equals_allreduce:
                for got, want in zip(params, trained[REFERENCE], strict=True):
                    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, msg=name)
