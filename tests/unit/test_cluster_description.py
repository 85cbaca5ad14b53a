"""A cluster described instead of measured (``gradsync simulate --cluster``): measured α-β fits
of collectives per worker count, the machines' compute and selection costs, the file's checks,
and the OMGS paper's own cost models (eqs. 4–11 with its authors' published models) computed
by hand against what the simulator predicts on the paper's cluster."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torchvision
from omegaconf import OmegaConf

from gradsync.algorithms.costs import CostModel
from gradsync.algorithms.merge_plans import threshold_groups
from gradsync.projection.cluster import AlphaBeta, Cluster
from gradsync.projection.cluster_spec import Described, load
from gradsync.projection.estimates import Job, ModelProfile, Wire
from gradsync.projection.machine import Compute
from gradsync.projection.selection import SelectionCost
from gradsync.schedulers.allreduce.config import AllreduceConfig
from gradsync.schedulers.costs import predict
from gradsync.schedulers.pipelined.config import MgsSchedulerConfig

GBIT = 1e9
OMGS_CLUSTER = Path(__file__).resolve().parents[2] / "benchmarks/clusters/omgs_p102_1gbe.yaml"


# ---- measured collectives ------------------------------------------------------------------------
def test_a_fit_prices_its_collective_at_its_worker_count_and_the_link_elsewhere():
    fits = {"all_gather": (AlphaBeta(1.1e-2, 1.7e-8, workers=16), AlphaBeta(4e-3, 1.5e-8, 8))}
    at_16 = Cluster(workers=16, bandwidth_bps=GBIT, fitted=fits)
    # nccl-tests' size of an all-gather is everyone's bytes: 16 payloads.
    assert at_16.all_gather(1000) == pytest.approx(1.1e-2 + 1.7e-8 * 16 * 1000)
    assert at_16.with_workers(8).all_gather(1000) == pytest.approx(4e-3 + 1.5e-8 * 8 * 1000)
    unfitted = Cluster(workers=4, bandwidth_bps=GBIT)
    assert at_16.with_workers(4).all_gather(1000) == unfitted.all_gather(1000)
    # Other collectives keep the link's formulas.
    assert at_16.all_reduce(1000) == replace(at_16, fitted={}).all_reduce(1000)


def test_a_fit_for_a_count_wins_over_one_for_every_count():
    fits = {"all_reduce": (AlphaBeta(1.0, 0.0), AlphaBeta(2.0, 0.0, workers=4))}
    cluster = Cluster(workers=4, bandwidth_bps=GBIT, fitted=fits)
    assert cluster.all_reduce(10) == 2.0
    assert cluster.with_workers(8).all_reduce(10) == 1.0
    assert cluster.with_workers(1).all_reduce(10) == 0.0  # one worker exchanges nothing


def test_broadcast_and_point_to_point_fits_price_their_bytes():
    fits = {"broadcast": (AlphaBeta(1e-3, 1e-9),), "point_to_point": (AlphaBeta(2e-3, 4e-9),)}
    cluster = Cluster(workers=4, bandwidth_bps=GBIT, servers=2, fitted=fits)
    assert cluster.broadcast(1e6) == pytest.approx(1e-3 + 1e-9 * 1e6)
    # Each server's link carries the pushes and pulls of its share of the workers.
    assert cluster.servers_busy(100, 300) == pytest.approx(2 * 4e-9 * 400)
    assert cluster.push_pull(100, 300) == pytest.approx(2 * 2e-3 + 2 * 4e-9 * 400)
    assert cluster.own_push_pull(100, 300) == pytest.approx(2 * 2e-3 + 4e-9 * 400)


def test_the_second_link_is_its_bandwidth_alone():
    fits = {"all_reduce": (AlphaBeta(5.0, 0.0),)}
    cluster = Cluster(workers=4, bandwidth_bps=GBIT, second_bandwidth_bps=GBIT / 2, fitted=fits)
    second = cluster.second_link()
    assert second is not None and second.fitted == {}
    assert second.all_reduce(1e6) < 5.0


def test_a_fit_of_no_collective_is_refused():
    with pytest.raises(ValueError, match="no collective 'alltoall'"):
        Cluster(workers=2, bandwidth_bps=GBIT, fitted={"alltoall": (AlphaBeta(0, 0),)})


# ---- the machines ----------------------------------------------------------------------------
PROFILE = ModelProfile(
    model="toy",
    sizes=(100, 10, 1000),
    forward=(1.0, 2.0, 1.0),
    backward=(2.0, 4.0, 2.0),
    update=2.0,
    data=1.0,
    batch_size=32,
    element_bytes=4,
)  # 14 s of compute


@pytest.mark.parametrize(
    ("compute", "total"),
    [(Compute(seconds=0.7), 0.7), (Compute(throughput=64.0), 0.5)],
    ids=["seconds", "throughput"],
)
def test_compute_per_iteration_keeps_the_profiles_shares(compute, total):
    profile, factor = compute.applied(PROFILE)
    assert profile.compute == pytest.approx(total)
    assert factor == pytest.approx(total / 14)
    assert profile.backward[1] / profile.backward[0] == pytest.approx(2.0)
    assert profile.update / profile.compute == pytest.approx(2 / 14)
    assert profile.data == 0.0  # this host's loading says nothing of the cluster's


def test_compute_by_pass_sets_each_pass_and_spreads_it_as_profiled():
    profile, factor = Compute(forward=0.2, backward=0.6, update=0.1).applied(PROFILE)
    assert sum(profile.forward) == pytest.approx(0.2)
    assert sum(profile.backward) == pytest.approx(0.6)
    assert profile.update == 0.1
    assert profile.forward == pytest.approx((0.05, 0.1, 0.05))
    assert factor == pytest.approx(0.9 / 14)


@pytest.mark.parametrize(
    "fields",
    [{}, {"seconds": 1.0, "throughput": 2.0}, {"forward": 1.0}, {"seconds": -1.0}],
    ids=["none", "two-forms", "one-pass", "negative"],
)
def test_compute_takes_exactly_one_form(fields):
    with pytest.raises(ValueError, match="compute"):
        Compute(**fields)


def test_a_selection_cost_replaces_the_measured_compression_time_by_its_formula():
    cost = SelectionCost(d_log2_d=2e-10, per_element=1e-9)
    assert cost.seconds(1024) == pytest.approx(2e-10 * 1024 * 10 + 1e-9 * 1024)
    wire = Wire(
        "topk", numel=2**20, calls=(("all_gather", 0.008),), compress_seconds=5.0, density=0.001
    )
    priced = wire.with_selection(cost)
    assert priced.compress_seconds == pytest.approx(cost.seconds(2**20))
    # A group's selection is d·log2 d of its own size, not a share of the whole one.
    assert priced.compress_of(1024) == pytest.approx(cost.seconds(1024))
    assert wire.compress_of(1024) == pytest.approx(5.0 * 1024 / 2**20)
    cluster = Cluster(workers=2, bandwidth_bps=GBIT)
    assert priced.exchange_seconds(cluster, 1024) == pytest.approx(
        cost.seconds(1024) + wire.transfer_seconds(cluster, 1024)
    )
    assert wire.with_selection(None) is wire


def test_a_per_element_cost_adds_to_the_top_k_model_of_a_group():
    plain = CostModel(gamma=2e-7, alpha=1e-3, beta=1e-8, density=0.01)
    linear = replace(plain, per_element=1e-9)
    assert linear.select_seconds(4096) == pytest.approx(plain.select_seconds(4096) + 4096e-9)
    dense = replace(linear, density=1.0)
    assert dense.select_seconds(4096) == pytest.approx(4096e-9)  # nothing sorted, all scanned


# ---- the file ------------------------------------------------------------------------------
def test_the_omgs_cluster_file_is_the_papers_cluster():
    described = Described(load(OMGS_CLUSTER, []))
    cluster = described.cluster(Cluster(workers=2, bandwidth_bps=1e8, shared_host_cores=2))
    assert (cluster.workers, cluster.bandwidth_bps, cluster.shared_host_cores) == (16, GBIT, None)
    assert cluster.fit("all_gather") == AlphaBeta(1.1e-2, 1.7e-8, 16)
    assert cluster.with_workers(4).fit("all_gather") == AlphaBeta(2.7e-3, 1.3e-8, 4)
    assert described.compute() == Compute(seconds=0.18)
    assert described.selection(["topk", "none"]) == {"topk": SelectionCost(2.18896957e-10)}


def test_options_set_the_files_keys_over_it():
    spec = load(OMGS_CLUSTER, ["compute.seconds=0.5", "selection.dgc.per_element=1e-9"])
    described = Described(spec)
    assert described.compute() == Compute(seconds=0.5)
    assert described.selection(["topk", "dgc"])["dgc"] == SelectionCost(per_element=1e-9)


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("comput: {seconds: 1}\n", "unknown key 'comput'; valid keys: workers, bandwidth"),
        ("compute: {sconds: 1}\n", "unknown key 'compute.sconds'; valid keys in compute"),
        ("workers: many\n", "workers: Value 'many'"),
        ("collectives:\n  all_gather: [{alpha: 1}]\n", "collectives.all_gather[0].beta is missing"),
        ("- 1\n", "a mapping of keys, not a list"),
        ("collectives: {all_gather: {alpha: 1, beta: 2}}\n", "collectives.all_gather: Cannot"),
        ("compute: 0.18\n", "compute: Merge error"),
        ("a: [\n", "not a YAML cluster description"),
    ],
    ids=[
        "unknown-key",
        "unknown-nested-key",
        "type",
        "missing-beta",
        "list",
        "fit-not-a-list",
        "compute-not-a-mapping",
        "yaml",
    ],
)
def test_a_bad_file_is_one_line_naming_it_and_the_key(tmp_path, text, message):
    path = _file(tmp_path, text)
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        load(path, [])
    assert str(error.value).startswith(str(path)) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bandwidth: fast\n", "bandwidth 'fast' is not a rate"),
        ("algorithm: butterfly\n", "algorithm 'butterfly'"),
        (
            "collectives:\n  all_reduce: [{alpha: 1, beta: 0, workers: 4}, "
            "{alpha: 2, beta: 0, workers: 4}]\n",
            "two fits for the same worker count",
        ),
        ("collectives:\n  all_reduce: [{alpha: -1, beta: 0}]\n", "must be finite and >= 0"),
        ("workers: 0\n", "workers must be >= 1"),
        ("collectives:\n  all_reduce: [{alpha: .nan, beta: 0}]\n", "must be finite"),
        ("collectives:\n  all_reduce: [{alpha: 1, beta: 0, workers: 0}]\n", "workers >= 1"),
    ],
    ids=["rate", "algorithm", "duplicate-fit", "negative-fit", "workers", "nan", "fit-workers"],
)
def test_a_bad_cluster_is_refused_where_it_is_built(tmp_path, text, message):
    described = Described(load(_file(tmp_path, text), []))
    with pytest.raises(ValueError, match=re.escape(message)):
        described.cluster(Cluster(workers=2, bandwidth_bps=GBIT))


def test_a_selection_for_no_compressor_or_of_nothing_is_refused(tmp_path):
    unknown = Described(load(_file(tmp_path, "selection: {zip: {d_log2_d: 1e-9}}\n"), []))
    with pytest.raises(ValueError, match=r"selection\.zip: no such compressor; valid: topk"):
        unknown.selection(["topk"])
    empty = Described(load(_file(tmp_path, "selection: {topk: {}}\n"), []))
    with pytest.raises(ValueError, match=r"selection\.topk: .*needs d_log2_d or per_element"):
        empty.selection(["topk"])


# ---- the OMGS paper's models, by hand ----------------------------------------------------------
S, A, B, P, RHO = 2.18896957e-10, 1.1e-2, 1.7e-8, 16, 0.001
"""The authors' code: topk_perf_model's s; allgather_perf_model's (a, b) at P = 16; ρ."""


def _topk_perf_model(x: int) -> float:
    return S * x * math.log2(x) if x else 0.0


def _allgather_perf_model(x: int) -> float:
    """Values and indices of x selected elements: (a + b·x·P·4)·2."""
    return (A + B * x * P * 4) * 2 if x else 0.0


def _resnet50_job(scheduler: object, selection: SelectionCost | None = None) -> Job:
    sizes = tuple(p.numel() for p in torchvision.models.resnet50().parameters())[::-1]
    profile = ModelProfile(
        model="ResNet",
        sizes=sizes,
        forward=tuple(0.06 / len(sizes) for _ in sizes),
        backward=tuple(0.12 * size / sum(sizes) for size in sizes),
        update=0.0,
        data=0.0,
        batch_size=16,
        element_bytes=4,
    )
    wire = Wire(
        "topk",
        numel=sum(sizes),
        calls=(("all_gather", 4 * RHO), ("all_gather", 4 * RHO)),  # float32 values, int32 indices
        compress_seconds=0.0,
        density=RHO,
        workers=P,
    ).with_selection(selection or SelectionCost(d_log2_d=S))
    cluster = Cluster(workers=P, bandwidth_bps=GBIT, fitted={"all_gather": (AlphaBeta(A, B, P),)})
    return Job(profile, cluster, wire, OmegaConf.structured(scheduler))


def test_topk_sgd_on_the_papers_cluster_is_eq_4_with_the_authors_models():
    job = _resnet50_job(AllreduceConfig())
    d = job.profile.numel
    by_hand = 0.06 + 0.12 + _topk_perf_model(d) + _allgather_perf_model(int(RHO * d))
    estimate = predict("allreduce", job)
    assert estimate.iteration == pytest.approx(by_hand, rel=1e-6)
    assert estimate.groups == 1


LINEAR = 3e-9  # seconds per element: a selection that scans


@pytest.mark.parametrize(
    ("selection", "select"),
    [
        (SelectionCost(d_log2_d=S), _topk_perf_model),
        (SelectionCost(per_element=LINEAR), lambda d: LINEAR * d),
    ],
    ids=["d-log2-d", "per-element"],
)
def test_mgs_on_the_papers_cluster_is_eqs_5_to_9_over_53_groups(selection, select):
    job = _resnet50_job(MgsSchedulerConfig(threshold=8192), selection)
    plan = threshold_groups(job.profile.sizes, 8192)
    assert len(plan) == 53  # Table V
    compute = link = 0.0
    start = 0
    for length in plan:  # output side first: backward, selection, then the group's all-gathers
        group = range(start, start + length)
        start += length
        d = sum(job.profile.sizes[i] for i in group)
        compute += sum(job.profile.backward[i] for i in group) + select(d)
        link = max(compute, link) + _allgather_perf_model(max(1, int(RHO * d)))
    estimate = predict("mgs", job)
    assert estimate.iteration == pytest.approx(0.06 + link, rel=1e-6)
    assert estimate.groups == 53


# ---- the command's options over the file -------------------------------------------------------
def _described(*args: str) -> Described | None:
    from gradsync.cli.simulate import _parser
    from gradsync.cli.simulate_cluster import described

    parsed = _parser().parse(list(args))
    assert parsed is not None
    return described(parsed)


def test_an_option_replaces_what_the_file_says_of_the_same_thing():
    file = ("--cluster", str(OMGS_CLUSTER))
    assert _described(*file, "--throughput", "88").compute() == Compute(throughput=88.0)
    per_element = _described(*file, "--selection", "topk=3e-9/element").selection(["topk"])
    assert per_element == {"topk": SelectionCost(per_element=3e-9)}  # not added to the file's
    refit = _described(*file, "--collective", "all_gather=0.02,1e-8@16").fitted()
    assert refit["all_gather"][-1] == AlphaBeta(0.02, 1e-8, 16)
    assert [fit.workers for fit in refit["all_gather"]] == [2, 4, 8, 16]
    assert _described("--compute-scale", "0.5") is None  # the job's own cluster, scaled


def test_a_described_cluster_plans_with_its_own_costs_not_a_fit_made_here():
    from gradsync.jobs.compose import compose_jobs
    from gradsync.measure.jobs import Predictor
    from gradsync.measure.planning import fits_here

    overrides = ["scheduler=omgs", "compressor=topk", "compressor.exchange=allgather"]
    (cfg,) = compose_jobs(
        [*overrides, "runner=netem"], multirun=False, launcher_here=False, machine=False
    )
    assert fits_here("omgs", cfg)  # on this host's shaped links it would fit in place
    assert Predictor(plans_here=False)._decisions(cfg, "omgs") == {}


def test_the_projection_names_the_columns_a_fit_does_not_cover():
    from gradsync.cli.simulate import _unfitted

    cluster = Described(load(OMGS_CLUSTER, [])).cluster(Cluster(workers=2, bandwidth_bps=GBIT))
    (line,) = _unfitted(cluster, [8, 16, 32], [GBIT, 10 * GBIT])
    assert "all_gather" in line
    assert "32@1000mbit" in line and "16@10000mbit" in line and "16@1000mbit" not in line
    assert _unfitted(cluster, [16], [GBIT]) == []
