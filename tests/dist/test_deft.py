"""DeFT on real gloo ranks (docs/methods/schedulers/deft.md, "What the tests check"): with delay
off it trains exactly as WFBP and the flat all-reduce do; with unlimited windows it is SGD with
one iteration of delay (the sends of a gradient applied later run on past the step); with tight
windows it applies, and only applies, the merged gradients its state machine says, over one link
or two. A resumed job continues as if it had not stopped, and a profiled job plans the same
schedule on every worker."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from gradsync.algorithms.deft_queues import DeftQueues
from gradsync.comm.collective import TorchCollective
from gradsync.compressors.none import NoneCompressor
from gradsync.feedback.none import NoneFeedback
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from gradsync.schedulers.deft.config import DEFT_CORRECTIONS as CORRECTIONS
from gradsync.schedulers.deft.deft import PROFILE_FILE, DeftSync
from gradsync.schedulers.engine.buckets import Buckets
from gradsync.schedulers.pipelined.wfbp import WfbpSync
from gradsync.schedulers.staleness_options import DC_LAMBDA
from tests.helpers.dist import run_world
from tests.helpers.training import local_loss, sgd, tiny_data, tiny_model

pytestmark = pytest.mark.dist

STEPS = 12
PARTITION = 100  # elements: the tiny model's 436 make 5 buckets


def _components() -> dict:
    return {
        "compressor": NoneCompressor(),
        "feedback": NoneFeedback(),
        "collective": TorchCollective(),
        "clock": time.perf_counter,
    }


def _sizes() -> list[int]:
    return [p.numel() for p in tiny_model().parameters()][::-1]


def _times(comm: float, window: float = 1e-3) -> dict:
    """Buckets of PARTITION elements, each with the given communication time and windows of
    ``window`` per bucket in forward and in backward."""
    buckets = Buckets.partition(_sizes(), PARTITION)
    n = len(buckets)
    return {
        "bounds": list(buckets.bounds),
        "forward": [window] * n,
        "backward": [window] * n,
        "comm": [comm] * n,
        "mu": 1.65,
    }


def _train(rank: int, world_size: int, make, *, stop_after: int | None = None) -> dict:
    model = tiny_model()
    data = tiny_data(STEPS, world_size)
    opt = sgd(model)
    sync = make()
    sync.attach(model, opt)
    extras = []
    for step in range(STEPS):
        if step == stop_after:  # a resumed job: new model, optimizer and scheduler
            state = {
                "model": model.state_dict(),
                "opt": opt.state_dict(),
                "sync": sync.state_dict(),
            }
            model, sync = tiny_model(), make()
            model.load_state_dict(state["model"])
            opt = sgd(model)
            opt.load_state_dict(state["opt"])
            sync.attach(model, opt)
            sync.load_state_dict(state["sync"])
        sync.begin(step=step)
        loss = local_loss(model, data, step, rank, world_size)
        loss.backward()
        extras.append(sync.step(step=step, loss=loss.detach()).extra)
        opt.zero_grad(set_to_none=True)
    sync.flush()
    return {"params": [p.detach().clone() for p in model.parameters()], "extras": extras}


def _replay(rank: int, world_size: int, times: dict, *, mean: bool, links: int) -> dict:
    """The reference: every step's gradient all-reduced at once, kept, and applied as the state
    machine's updates say (the mean or the sum over the merged iterations)."""
    model = tiny_model()
    data = tiny_data(STEPS, world_size)
    opt = sgd(model)
    collective = TorchCollective()
    queues = DeftQueues(
        comm=times["comm"],
        backward=times["backward"],
        forward_time=sum(times["forward"]),
        backward_time=sum(times["backward"]),
        mu=times["mu"] if links == 2 else None,
    )
    gradients: dict[int, torch.Tensor] = {}
    for step in range(STEPS):
        plan = queues.step()
        local_loss(model, data, step, rank, world_size).backward()
        (summed,) = collective.all_reduce(
            (torch.cat([p.grad.reshape(-1) for p in model.parameters()]),)
        )
        gradients[step] = summed
        opt.zero_grad(set_to_none=True)
        if plan.applied is not None:
            merged = sum(gradients.pop(i) for i in plan.applied)
            merged = merged / (world_size * (len(plan.applied) if mean else 1))
            offset = 0
            for p in model.parameters():
                p.grad = merged[offset : offset + p.numel()].view_as(p).clone()
                offset += p.numel()
            opt.step()
            opt.zero_grad(set_to_none=True)
    return {"params": [p.detach().clone() for p in model.parameters()]}


def _delayed_sgd(rank: int, world_size: int, correction: str = "none") -> dict:
    """SGD that applies at the end of step t the averaged gradient of step t − 1. From the
    second update on, that gradient is one update old (the first was computed at the weights it
    is applied to); ``correction`` says what is done about it, written out here:
    ``momentum`` steps with momentum 0.9 − 1/2 (staleness 1 adds 1/2), ``dc`` applies
    g + λ·g⊙g⊙(w_now − w_then), ``lr`` steps at half the learning rate (1/(τ + 1))."""
    model = tiny_model()
    data = tiny_data(STEPS, world_size)
    opt = sgd(model)
    collective = TorchCollective()
    previous = None
    weights_then: list[torch.Tensor] = []
    for step in range(STEPS):
        weights = [p.detach().clone() for p in model.parameters()]
        local_loss(model, data, step, rank, world_size).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        opt.zero_grad(set_to_none=True)
        for g in grads:
            collective.all_reduce((g,))
            g /= world_size
        if previous is not None:
            for p, g, then in zip(model.parameters(), previous, weights_then, strict=True):
                if correction == "dc":
                    g = g + DC_LAMBDA * g * g * (p.detach() - then)
                p.grad = g
            if correction == "momentum" and step >= 2:
                opt.param_groups[0]["momentum"] = 0.9 - 0.5
            lr = opt.param_groups[0]["lr"]
            if correction == "lr" and step >= 2:
                opt.param_groups[0]["lr"] = lr / 2
            opt.step()
            opt.param_groups[0]["lr"] = lr
            opt.zero_grad(set_to_none=True)
        previous, weights_then = grads, weights
    return {"params": [p.detach().clone() for p in model.parameters()]}


def _deft(**options):
    options.setdefault("staleness_correction", "none")  # the paper's updates: delayed SGD
    return lambda: DeftSync(partition_size=PARTITION, **options, **_components())


def _train_all(rank: int, world_size: int, root: str) -> dict:
    files = {}
    for name, comm in (("unlimited", 1e-9), ("tight", 2.5e-3)):
        files[name] = Path(root) / f"{name}.json"
        if rank == 0:
            files[name].write_text(json.dumps(_times(comm)))
    TorchCollective().all_reduce((torch.zeros(1),))  # the files exist before anyone reads them
    tight = json.loads(files["tight"].read_text())
    run_dir = Path(root) / f"run{rank}"
    run_dir.mkdir(exist_ok=True)
    results = {
        "allreduce": _train(rank, world_size, lambda: AllreduceSync(**_components())),
        "wfbp": _train(rank, world_size, lambda: WfbpSync(bucket_mb=1e-3, **_components())),
        "no_delay": _train(rank, world_size, _deft(delay=False, profile_steps=2)),
        "unlimited": _train(rank, world_size, _deft(times=str(files["unlimited"]))),
        "delayed_sgd": _delayed_sgd(rank, world_size),
        **{
            f"no_delay_{c}": _train(
                rank, world_size, _deft(delay=False, profile_steps=2, staleness_correction=c)
            )
            for c in CORRECTIONS
        },
        **{
            f"unlimited_{c}": _train(
                rank,
                world_size,
                _deft(times=str(files["unlimited"]), staleness_correction=c),
            )
            for c in CORRECTIONS
        },
        **{f"delayed_sgd_{c}": _delayed_sgd(rank, world_size, c) for c in CORRECTIONS},
        "tight": _train(rank, world_size, _deft(times=str(files["tight"]))),
        "tight_replay": _replay(rank, world_size, tight, mean=True, links=1),
        "tight_sum": _train(
            rank, world_size, _deft(times=str(files["tight"]), merge_reduction="sum")
        ),
        "tight_sum_replay": _replay(rank, world_size, tight, mean=False, links=1),
        "two_links": _train(rank, world_size, _deft(times=str(files["tight"]), links=2)),
        "two_links_replay": _replay(rank, world_size, tight, mean=True, links=2),
        "resumed": _train(rank, world_size, _deft(times=str(files["tight"])), stop_after=5),
        **{
            f"resumed_{c}": _train(
                rank,
                world_size,
                _deft(times=str(files["unlimited"]), staleness_correction=c),
                stop_after=5,
            )
            for c in CORRECTIONS
        },
        "profiled": _train(
            rank,
            world_size,
            lambda: DeftSync(
                partition_size=PARTITION, profile_steps=2, run_dir=run_dir, **_components()
            ),
        ),
    }
    saved = run_dir / PROFILE_FILE
    results["saved"] = json.loads(saved.read_text()) if saved.exists() else None
    return results


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[dict]:
    root = tmp_path_factory.mktemp("deft")
    return run_world(_train_all, 2, root / "world", str(root))


def _assert_same_params(ours: dict, reference: dict) -> None:
    for mine, ref in zip(ours["params"], reference["params"], strict=True):
        torch.testing.assert_close(mine, ref, rtol=0, atol=1e-12)


def test_with_delay_off_deft_trains_as_wfbp_and_the_flat_allreduce(runs):
    initial = list(tiny_model().parameters())
    for rank in range(2):
        flat = runs[rank]["allreduce"]
        assert any(not torch.equal(a, b) for a, b in zip(flat["params"], initial, strict=True))
        _assert_same_params(runs[rank]["wfbp"], flat)
        _assert_same_params(runs[rank]["no_delay"], flat)
        assert all(e["sched/update_applied"] == 1.0 for e in runs[rank]["no_delay"]["extras"])
        # Each gradient is applied in the step that sends it: nothing is left in flight.
        assert all(e["sched/carried_buckets"] == 0 for e in runs[rank]["no_delay"]["extras"])


def test_with_unlimited_windows_deft_is_sgd_delayed_by_one_iteration(runs):
    for rank in range(2):
        _assert_same_params(runs[rank]["unlimited"], runs[rank]["delayed_sgd"])
        applied = [e["sched/update_applied"] for e in runs[rank]["unlimited"]["extras"]]
        assert applied == [0.0] + [1.0] * (STEPS - 1)
        # Each step's gradient is applied a step later, so the step does not wait for the
        # buckets it sent in backward: their all-reduces run on into the next forward pass.
        carried = [e["sched/carried_buckets"] for e in runs[rank]["unlimited"]["extras"]]
        assert all(c > 0 for c in carried)


@pytest.mark.parametrize("correction", CORRECTIONS)
def test_a_resumed_job_corrects_its_stale_updates_as_an_uninterrupted_one(runs, correction):
    for rank in range(2):
        _assert_same_params(
            runs[rank][f"resumed_{correction}"], runs[rank][f"unlimited_{correction}"]
        )


@pytest.mark.parametrize("correction", CORRECTIONS)
def test_a_staleness_correction_is_none_where_nothing_is_stale(runs, correction):
    # Delay off: every gradient is applied at the weights it was computed at.
    for rank in range(2):
        for mine, ref in zip(
            runs[rank][f"no_delay_{correction}"]["params"],
            runs[rank]["no_delay"]["params"],
            strict=True,
        ):
            assert torch.equal(mine, ref)


@pytest.mark.parametrize("correction", CORRECTIONS)
def test_a_staleness_correction_applies_its_formula_to_one_step_late_gradients(runs, correction):
    for rank in range(2):
        ours = runs[rank][f"unlimited_{correction}"]
        _assert_same_params(ours, runs[rank][f"delayed_sgd_{correction}"])
        staleness = [e.get("sched/applied_staleness") for e in ours["extras"]]
        assert staleness[1:] == [0.0] + [1.0] * (STEPS - 2)
    if correction != "none":  # and it changes the trajectory
        ours, plain = runs[0][f"unlimited_{correction}"], runs[0]["unlimited_none"]
        assert any(
            not torch.equal(a, b) for a, b in zip(ours["params"], plain["params"], strict=True)
        )


@pytest.mark.parametrize(
    ("case", "reference"),
    [
        ("tight", "tight_replay"),
        ("tight_sum", "tight_sum_replay"),
        ("two_links", "two_links_replay"),
    ],
)
def test_tight_windows_apply_exactly_the_merged_updates_the_state_machine_plans(
    runs, case, reference
):
    for rank in range(2):
        _assert_same_params(runs[rank][case], runs[rank][reference])
    extras = runs[0][case]["extras"]
    assert extras == runs[1][case]["extras"]
    if case == "two_links":  # the second link carried buckets, so fewer updates were delayed
        assert sum(e["sched/second_link_buckets"] for e in extras) > 0
        updates = [
            sum(e["sched/update_applied"] for e in runs[0][c]["extras"]) for c in (case, "tight")
        ]
        assert updates[0] > updates[1]
    else:
        assert 0 in [e["sched/update_applied"] for e in extras]  # some steps did not update
        assert max(e["sched/merged_iters"] for e in extras) > 1  # and gradients were merged


def test_a_resumed_job_continues_its_schedule_and_merged_gradients(runs):
    for rank in range(2):
        _assert_same_params(runs[rank]["resumed"], runs[rank]["tight"])


def test_a_profiled_job_plans_the_same_schedule_on_every_worker_and_saves_it(runs):
    first, second = (runs[rank]["profiled"]["extras"] for rank in range(2))
    planned = [e for e in first if "sched/coverage_rate" in e]
    assert len(planned) == STEPS - 3  # warm-up step and two profiled steps first
    keys = ("sched/buckets", "sched/coverage_rate", "sched/mu", "sched/capacity_scale")
    for a, b in zip(first, second, strict=True):
        assert {k: a.get(k) for k in keys} == {k: b.get(k) for k in keys}
    ratio = planned[-1]["sched/preserver_ratio"]
    assert 0.5 < ratio < 2
    profile = runs[0]["saved"]
    assert profile is not None and runs[1]["saved"] is None  # rank 0 saves it with the run
    assert len(profile["comm"]) == planned[-1]["sched/buckets"] == len(profile["bounds"]) - 1
    assert all(c > 0 for c in profile["comm"]) and all(b > 0 for b in profile["backward"])
