"""Pipelined schedulers on real gloo ranks: exchanging groups during backward must not change
what is learned. At density 1 every scheduler ends with the flat all-reduce's parameters."""

from __future__ import annotations

import json
import time

import pytest
import torch

from gradsync.comm.collective import TorchCollective
from gradsync.compressors.none import NoneCompressor
from gradsync.compressors.topk import TopKCompressor
from gradsync.feedback.residual import ResidualFeedback
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from gradsync.schedulers.pipelined.lags import LagsSync
from gradsync.schedulers.pipelined.mgs import MgsSync
from gradsync.schedulers.pipelined.omgs import OmgsSync
from gradsync.schedulers.pipelined.wfbp import WfbpSync
from tests.helpers.dist import run_world
from tests.helpers.training import local_loss, sgd, tiny_data, tiny_model

pytestmark = pytest.mark.dist

STEPS = 6
_model = tiny_model


def _compressor(kind: str, density: float, exchange: str):
    return (
        NoneCompressor() if kind == "none" else TopKCompressor(density=density, exchange=exchange)
    )


def _make_sync(name: str, kind: str, density: float, exchange: str, options: dict):
    compressor = _compressor(kind, density, exchange)
    components = {
        "compressor": compressor,
        "feedback": ResidualFeedback(),
        "collective": TorchCollective(),
        "clock": time.perf_counter,
    }
    schedulers = {
        "allreduce": AllreduceSync,
        "wfbp": WfbpSync,
        "lags": LagsSync,
        "mgs": MgsSync,
        "omgs": OmgsSync,
    }
    return schedulers[name](**options, **components)


def _train(
    rank: int, world_size: int, name: str, kind: str, density: float, exchange: str, options: dict
) -> dict:
    model = _model()
    data = tiny_data(STEPS, world_size)
    opt = sgd(model)
    sync = _make_sync(name, kind, density, exchange, options)
    sync.attach(model, opt)
    groups = []
    for step in range(STEPS):
        sync.begin(step=step)
        local_loss(model, data, step, rank, world_size).backward()
        stats = sync.step(step=step)
        groups.append(stats.extra.get("sched/groups", 1.0))
        opt.zero_grad(set_to_none=True)
    return {
        "params": [p.detach().clone() for p in model.parameters()],
        "groups": groups,
        "density": stats.density_actual,
        "bytes": stats.bytes_sent,
    }


CASES = [
    ("wfbp", "none", {"bucket_mb": 25.0}),
    ("wfbp", "none", {"bucket_mb": 0.001, "first_bucket_mb": 0.001}),  # several buckets
    ("lags", "topk", {}),
    ("mgs", "topk", {"threshold": 100}),
    ("omgs", "topk", {"rule": "paper", "profile_steps": 2}),
    ("omgs", "topk", {"rule": "optimal", "profile_steps": 2}),
]


def _train_all(rank: int, world_size: int, costs: str) -> dict:
    """Every case and its flat reference in one world (spawning ranks costs seconds)."""
    results: dict = {
        ("allreduce", kind): _train(rank, world_size, "allreduce", kind, 1.0, "allgather", {})
        for kind in ("none", "topk")
    }
    for i, (name, kind, options) in enumerate(CASES):
        results[i] = _train(rank, world_size, name, kind, 1.0, "allgather", options)
    results["sparse"] = _train(rank, world_size, "lags", "topk", 0.1, "allgather", {})
    options = {"rule": "optimal", "profile_steps": 1, "costs": costs}
    results["costs"] = _train(rank, world_size, "omgs", "topk", 0.5, "allgather", options)
    results["fits"] = _in_place_fits(rank)
    return results


def _in_place_fits(rank: int) -> dict:
    """OMGS's cost model from profiled exchanges whose time grows with their bytes, and from
    ones that took the same time at every size (as within a shaper's burst)."""
    from gradsync.schedulers.pipelined.omgs import OmgsPlanner
    from gradsync.schedulers.pipelined.pipelined import Measurements

    selections = [(4096, 1e-4), (65536, 2e-3), (16384, 5e-4)]
    sizes = [1e3, 1e5, 1e4]
    fits = {}
    for name, seconds in (("growing", [1e-3 + 1e-8 * b for b in sizes]), ("flat", [1e-3] * 3)):
        job = Measurements(
            sizes=[4096, 65536, 16384],
            element_size=4,
            density=0.01,
            device=torch.device("cpu"),
            link=TorchCollective(),
            selections=selections,
            exchanges=list(zip(sizes, seconds, strict=True)),
        )
        cost = OmgsPlanner("optimal", profile_steps=1, costs=None).cost_model(job)
        fits[name] = (cost.alpha, cost.beta)
    return fits


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[dict]:
    root = tmp_path_factory.mktemp("pipelined")
    costs = root / "costs.json"
    costs.write_text(json.dumps({"gamma": 1e-9, "alpha": 1.0, "beta": 1e-9}))  # latency-bound
    return run_world(_train_all, 2, root / "world", str(costs))


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_dense_pipelined_training_equals_the_flat_allreduce(runs, case):
    name, kind, options = CASES[case]
    initial = list(_model().parameters())
    flat = [runs[rank][("allreduce", kind)] for rank in range(2)]
    ours = [runs[rank][case] for rank in range(2)]
    assert any(not torch.equal(a, b) for a, b in zip(flat[0]["params"], initial, strict=True))
    for rank in range(2):
        assert ours[rank]["density"] == 1.0
        for mine, ref in zip(ours[rank]["params"], flat[rank]["params"], strict=True):
            torch.testing.assert_close(mine, ref, rtol=0, atol=1e-12)
    groups = ours[0]["groups"]
    if name in ("lags", "mgs") or options.get("bucket_mb") == 0.001:
        assert min(groups) > 1  # the exchange really was split into groups
    assert groups == ours[1]["groups"]  # every worker runs the same plan


def test_sparse_pipelined_groups_send_layerwise_topk(runs):
    """Density 0.1 per group: each worker sends k = max(1, int(0.1·group)) values plus indices,
    and the workers' selections differ, so the actual density is above the setup one."""
    result = runs[0]["sparse"]
    sizes = [p.numel() for p in _model().parameters()]
    k = sum(max(1, int(0.1 * s)) for s in sizes)
    # float64 values and int32 indices; k is known everywhere, so no lengths are exchanged
    assert result["bytes"] == k * (8 + 4)
    assert 0.1 <= result["density"] <= 0.2 + 1e-9


def test_omgs_refits_on_the_real_link_when_its_profiled_exchanges_cost_nothing_per_byte(runs):
    fits = [runs[rank]["fits"] for rank in range(2)]
    alpha, beta = fits[0]["growing"]
    assert alpha == pytest.approx(1e-3) and beta == pytest.approx(1e-8)  # the fit, as it is
    # Bytes for free is no link's cost: the microbenchmarks measure one, the same everywhere.
    alpha, beta = fits[0]["flat"]
    assert beta > 0 and fits[1]["flat"] == (alpha, beta)


def test_omgs_plans_from_a_costs_file_the_same_on_every_worker(runs):
    results = [runs[rank]["costs"] for rank in range(2)]
    # With a second of start-up per exchange, one group is optimal.
    assert results[0]["groups"][-1] == 1.0 == results[1]["groups"][-1]
    assert results[0]["groups"][0] == len(list(_model().parameters()))  # profiled per tensor
    for a, b in zip(results[0]["params"], results[1]["params"], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
