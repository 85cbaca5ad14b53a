"""OSP on real ranks: two workers and a parameter server (gloo, point to point). After every
in-computation synchronization has been applied, a worker's parameters are the server's global
ones; with no unimportant layers OSP is ps_bsp, step for step (docs/methods/schedulers/osp.md,
"What the tests check")."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

from gradsync.comm.collective import TorchCollective
from gradsync.compressors.none import NoneCompressor
from gradsync.config.schema import TrainerConfig
from gradsync.feedback.none import NoneFeedback
from gradsync.schedulers.ps.config import OspConfig, PsBspConfig
from gradsync.schedulers.ps.groups import make_groups
from gradsync.schedulers.ps.osp import OspSync
from gradsync.schedulers.ps.worker import PsSync
from gradsync.train.servers import serve
from tests.helpers.dist import run_world
from tests.helpers.training import local_loss, sgd, tiny_data, tiny_model

pytestmark = pytest.mark.dist

WORKERS, STEPS = 2, 8
BSP = None  # the budget key of the ps_bsp run


def _cfg(budget: float | None) -> DictConfig:
    trainer = OmegaConf.structured(TrainerConfig(workers=WORKERS, lr=0.1, weight_decay=1e-3))
    scheduler = OmegaConf.structured(PsBspConfig() if budget is BSP else OspConfig(budget=budget))
    compressor = {"_target_": "gradsync.compressors.none.NoneCompressor"}
    return OmegaConf.create({"trainer": trainer, "scheduler": scheduler, "compressor": compressor})


def _train_each(rank: int, world_size: int, budgets: list[float | None]) -> dict:
    """Every budget's run in turn, in one world (its processes start once)."""
    group = make_groups(WORKERS, timedelta(seconds=60))
    return {budget: _train(rank, group, budget) for budget in budgets}


def _train(rank: int, group: dist.ProcessGroup | None, budget: float | None) -> dict:
    """OSP with a fixed unimportant budget, or ps_bsp; every rank's flat parameters after
    every step (a worker's once it has applied every correction)."""
    model = tiny_model()
    snapshots: list[torch.Tensor] = []
    if rank == WORKERS:
        serve(
            _cfg(budget),
            model,
            server=0,
            steps_per_epoch=STEPS,
            total_steps=STEPS,
            after_step=lambda values: snapshots.append(values.clone()),
        )
        return {"snapshots": snapshots}
    data = tiny_data(STEPS, WORKERS)
    opt = sgd(model)
    components = {
        "compressor": NoneCompressor(),
        "feedback": NoneFeedback(),
        "collective": TorchCollective(group=group),
        "clock": time.perf_counter,
    }
    sync = PsSync(**components) if budget is BSP else OspSync(budget=budget, **components)
    sync.attach(model, opt)
    extras = []
    for step in range(STEPS):
        sync.begin(step=step)
        loss = local_loss(model, data, step, rank, WORKERS)
        loss.backward()
        extras.append(sync.step(step=step, loss=loss.detach()).extra)
        opt.zero_grad(set_to_none=True)
        sync.flush()  # every correction applied
        snapshots.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    return {"snapshots": snapshots, "extras": extras}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[float | None, list[dict]]:
    budgets = [BSP, 0.0, 0.9, 1.0]
    ranks = run_world(_train_each, WORKERS + 1, tmp_path_factory.mktemp("osp"), budgets)
    return {b: [rank[b] for rank in ranks] for b in budgets}


@pytest.mark.parametrize("budget", [0.0, 0.9, 1.0])
def test_after_every_correction_workers_hold_the_global_model(runs, budget):
    server = runs[budget][WORKERS]["snapshots"]
    for rank in range(WORKERS):
        ours = runs[budget][rank]["snapshots"]
        for step, (mine, ref) in enumerate(zip(ours, server, strict=True)):
            torch.testing.assert_close(mine, ref, rtol=0, atol=1e-12, msg=f"step {step}")
    extras = runs[budget][0]["extras"]
    unimportant = [e["sched/unimportant_fraction"] for e in extras]
    if budget:
        assert max(unimportant[1:]) > 0  # layers really went through ICS (after step 0)
        assert all(e["sched/ics_bytes"] > 0 for e in extras[1:])
    else:
        assert unimportant == [0.0] * STEPS


def test_with_no_unimportant_layers_osp_is_ps_bsp_step_for_step(runs):
    """The same global model after every step: one flat optimizer on the BSP server, one per
    layer on OSP's, both elementwise, so equal to rounding."""
    bsp, osp = runs[BSP][WORKERS]["snapshots"], runs[0.0][WORKERS]["snapshots"]
    assert len(bsp) == len(osp) == STEPS
    for step, (a, b) in enumerate(zip(bsp, osp, strict=True)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12, msg=f"step {step}")
    for rank in range(WORKERS):  # and the workers hold it
        torch.testing.assert_close(runs[BSP][rank]["snapshots"][-1], bsp[-1], rtol=0, atol=0)


def test_ics_starts_after_the_first_step_and_changes_the_trajectory(runs):
    """The first iteration's bitmap is all important (nothing measured yet)."""
    bsp, osp = runs[0.0][WORKERS]["snapshots"], runs[0.9][WORKERS]["snapshots"]
    torch.testing.assert_close(bsp[0], osp[0], rtol=0, atol=0)
    assert not torch.equal(bsp[-1], osp[-1])


def test_a_budget_of_the_whole_model_sends_every_layer_in_the_background(runs):
    """budget=1.0: after the first iteration no layer is important, so the routine stage
    carries only the loss and compute time, and training still moves the model."""
    extras = runs[1.0][0]["extras"]
    assert [e["sched/unimportant_fraction"] for e in extras[1:]] == [1.0] * (STEPS - 1)
    assert all(e["sched/rs_bytes"] == 2 * 8 for e in extras[1:])  # two float64 stamps
    server = runs[1.0][WORKERS]["snapshots"]
    assert len(server) == STEPS and not torch.equal(server[0], server[-1])
