"""A cluster described instead of measured (``gradsync simulate --cluster``): measured α-β fits
of collectives per worker count, the machines' compute and selection costs, the file's checks,
and the OMGS paper's own cost models (eqs. 4–11 with its authors' published models) computed
by hand against what the simulator predicts on the paper's cluster."""

from __future__ import annotations

import argparse
import math
import os
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torchvision
from omegaconf import OmegaConf

from gradsync.algorithms.costs import CostModel
from gradsync.algorithms.merge_plans import threshold_groups
from gradsync.jobs.compose import ConfigError
from gradsync.projection.cluster import AlphaBeta, Cluster
from gradsync.projection.cluster_spec import MAX_FILE_BYTES, AlphaBetaSpec, Described, load
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


def _pattern(message: str) -> str:
    """``message`` to search for, where ``<finite>`` stands for the words a value that is not
    finite may be refused with ("must be a finite number in [0, 60]")."""
    return re.escape(message).replace(re.escape("<finite> "), "(?:a finite number )?")


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{this}: &{this} [{', '.join([f'*{last}'] * 10)}]\n"
    for last, this in zip("abcde", "bcdef", strict=True)
)  # 10**6 nodes once composed, in 300 bytes


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("comput: {seconds: 1}\n", "unknown key 'comput'; valid keys: workers, bandwidth"),
        ("compute: {sconds: 1}\n", "unknown key 'compute.sconds'; valid keys in compute"),
        ("workers: many\n", "workers: Value 'many'"),
        ("collectives:\n  all_gather: [{alpha: 1}]\n", "collectives.all_gather[0].beta is missing"),
        ("- 1\n", "a mapping of keys, not a list"),
        ("0.18\n", "a mapping of keys, not a single value"),
        ("!!binary \n", "a mapping of keys, not a single value"),  # found by Hypothesis
        ("collectives: {all_gather: {alpha: 1, beta: 2}}\n", "collectives.all_gather: Cannot"),
        ("compute: 0.18\n", "compute: Merge error"),
        # PyYAML's whole problem, where it is and what it was doing there.
        (
            "workers: 2\nbandwidth: [1gbit,\n",
            "line 3, column 1: expected the node content, but found '<stream end>' (while "
            "parsing a flow node); fix the YAML",
        ),
        (
            "workers: 2\ncompute: {seconds: 1\n",
            "line 3, column 1: expected ',' or '}', but got '<stream end>' (while parsing a "
            "flow mapping started at line 2, column 10); fix the YAML",
        ),
        (
            "workers: 2\nlatency: 1\nworkers: 4\n",
            "line 3, column 1: found duplicate key workers (while constructing a mapping "
            "started at line 1, column 1)",
        ),
        ("compute:\n\tseconds: 1\n", "line 2, column 1: found character '\\t'"),
        ("workers: 2\n---\nworkers: 4\n", "line 2, column 1: but found another document"),
        ("workers: 2\x00\n", "character #x0000 at position 10 is not allowed in YAML"),
        # Aliases: refused before anything is expanded.
        ("workers: &w 4\ncompute: {seconds: *w}\n", "line 2: YAML aliases (*w) are not supported"),
        (ALIAS_BOMB, "line 2: YAML aliases (*a) are not supported in a cluster description"),
        ("compute: " + "{a: " * 1000 + "1" + "}" * 1000 + "\n", "nested more than 8 levels"),
        # Nothing in it.
        ("", "is empty; write the cluster's keys in it"),
        ("# only a comment\n", "is empty"),
        ("null\n", "is empty"),
        ("{}\n", "is empty"),
        # Every number where it enters: finite, in range, bounded.
        ("latency: .nan\n", "latency must be <finite> in [0, 60] (seconds)"),
        ("latency: 1e308\n", "latency must be in [0, 60] (seconds) or null, got 1e+308"),
        ("latency: -1\n", "latency must be in [0, 60]"),
        ("workers: 0\n", "workers must be in [1, 1000000]"),
        ("workers: 100000000000\n", "workers must be in [1, 1000000] or null, got 100000000000"),
        ("gpus_per_node: 1025\n", "gpus_per_node must be in [1, 1024]"),
        ("bandwidth: fast\n", "bandwidth 'fast' is not a rate"),
        ("bandwidth: 0mbit\n", "bandwidth '0mbit' must be above 0 and at most 10000gbit"),
        ("intra_bandwidth: 20000gbit\n", "intra_bandwidth '20000gbit' must be above 0"),
        ("algorithm: butterfly\n", "unknown algorithm 'butterfly'; valid: ring, tree"),
        ('algorithm: "ring\\ntree"\n', "unknown algorithm 'ring\\ntree'"),
        ("compute: {seconds: .inf}\n", "compute.seconds must be <finite> in (0, 3600]"),
        ("compute: {seconds: 0}\n", "compute.seconds must be in (0, 3600]"),
        ("compute: {throughput: 1e12}\n", "compute.throughput must be in (0, 1000000000]"),
        ("selection: {topk: {d_log2_d: -1}}\n", "selection.topk.d_log2_d must be in [0, 0.001]"),
        (
            "collectives:\n  all_reduce: [{alpha: 1, beta: 0, workers: 4}, "
            "{alpha: 2, beta: 0, workers: 4}]\n",
            "collectives.all_reduce: two fits for the same worker count (4 workers)",
        ),
        (
            "collectives:\n  all_reduce: [{alpha: -1, beta: 0}]\n",
            "collectives.all_reduce[0].alpha must be in [0, 60] (seconds), got -1.0",
        ),
        (
            "collectives:\n  all_reduce: [{alpha: .nan, beta: 0}]\n",
            "collectives.all_reduce[0].alpha must be <finite> in [0, 60]",
        ),
        (
            "collectives:\n  all_gather: [{alpha: 1, beta: 1, workers: 4}]\n",
            "collectives.all_gather[0].beta must be in [0, 0.001] (seconds per byte)",
        ),
        (
            "collectives:\n  all_reduce: [{alpha: 1, beta: 0, workers: 0}]\n",
            "collectives.all_reduce[0].workers must be in [1, 1000000]",
        ),
    ],
    ids=[
        "unknown-key",
        "unknown-nested-key",
        "type",
        "missing-beta",
        "list",
        "scalar",
        "tagged-empty-scalar",
        "fit-not-a-list",
        "compute-not-a-mapping",
        "unclosed-bracket",
        "unclosed-brace",
        "duplicate-key",
        "tab",
        "two-documents",
        "nul",
        "alias",
        "alias-bomb",
        "deep",
        "empty",
        "comment",
        "null",
        "empty-mapping",
        "nan",
        "huge-latency",
        "negative-latency",
        "no-workers",
        "huge-workers",
        "gpus-per-node",
        "rate",
        "zero-rate",
        "huge-rate",
        "algorithm",
        "newline-in-value",
        "inf-compute",
        "zero-compute",
        "huge-throughput",
        "negative-selection",
        "duplicate-fit",
        "negative-fit",
        "nan-fit",
        "huge-beta",
        "fit-workers",
    ],
)
def test_a_bad_file_is_one_line_naming_it_and_the_key(tmp_path, text, message):
    path = _file(tmp_path, text)
    started = time.monotonic()
    with pytest.raises(ValueError, match=_pattern(message)) as error:
        load(path, [])
    assert str(error.value).startswith(str(path)) and "\n" not in str(error.value)
    assert time.monotonic() - started < 5  # nothing expanded


def test_what_is_not_a_yaml_file_is_one_line_naming_it(tmp_path):
    folder = tmp_path / "cluster.yaml"
    folder.mkdir()
    with pytest.raises(ValueError, match=r"cluster.yaml is a directory; give a YAML cluster"):
        load(folder, [])
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"workers: 2\nbandwidth: \xff\xfe1gbit\n")
    with pytest.raises(ValueError, match=r"binary.yaml: byte 22 \(0xff\) is not UTF-8 text"):
        load(binary, [])
    large = tmp_path / "large.yaml"
    large.write_text("# padding\n" * (MAX_FILE_BYTES // 10 + 1) + "workers: 2\n")
    with pytest.raises(ValueError, match=r"large.yaml is 65,5\d\d bytes, more than a cluster"):
        load(large, [])
    with pytest.raises(ValueError, match=r"missing.yaml: no such file"):
        load(tmp_path / "missing.yaml", [])


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its permissions")
def test_an_unreadable_file_is_one_line_naming_it(tmp_path):
    path = _file(tmp_path, "workers: 2\n")
    path.chmod(0)
    with pytest.raises(ValueError, match=r"cluster.yaml: cannot read it \(Permission denied\)"):
        load(path, [])


@pytest.mark.skipif(not Path("/proc/self/mem").is_file(), reason="Linux's /proc")
def test_a_file_that_fails_to_read_is_one_line_naming_it():
    """/proc/self/mem is a regular file whose reading fails (at address 0), even for root."""
    with pytest.raises(ValueError, match=r"^/proc/self/mem: cannot read it \(Input/output"):
        load(Path("/proc/self/mem"), [])


def test_an_anchor_alone_is_read(tmp_path):
    assert load(_file(tmp_path, "workers: &w 4\n"), []).workers == 4


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("workers: 8\ngpus_per_node: 3\nintra_bandwidth: 100gbit\n", "divide the 8 workers"),
        ("workers: 8\ngpus_per_node: 4\n", "needs intra_bandwidth"),
    ],
    ids=["gpus-per-node", "intra-bandwidth"],
)
def test_a_bad_cluster_is_refused_where_it_is_built(tmp_path, text, message):
    described = Described(load(_file(tmp_path, text), []))
    with pytest.raises(ValueError, match=re.escape(message)):
        described.cluster(Cluster(workers=2, bandwidth_bps=GBIT))


@pytest.mark.parametrize(
    "fields", [{"latency_s": math.nan}, {"latency_s": math.inf}, {"bandwidth_bps": math.inf}]
)
def test_a_cluster_of_numbers_that_are_not_is_refused(fields):
    with pytest.raises(ValueError, match=r"must be >= 0 and finite|must be > 0 and finite"):
        Cluster(**{"workers": 2, "bandwidth_bps": GBIT, **fields})


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


OPTIONS_OUT_OF_RANGE = [
    (["--latency", "nan"], "--latency: latency must be <finite> in [0, 60]"),
    (["--latency", "inf"], "--latency: latency must be <finite> in [0, 60]"),
    (["--latency", "1e308"], "--latency: latency must be in [0, 60] (seconds), got 1e+308"),
    (["--latency", "-1"], "--latency: latency must be in [0, 60]"),
    (["--workers", "4,1e11"], "--workers: worker counts must be in [1, 1000000], got 1000"),
    (["--workers", str(10**12)], "worker counts must be in [1, 1000000], got 1000000000000"),
    (["--workers", "0"], "worker counts must be in [1, 1000000], got 0"),
    (["--bandwidths", "1gbit,0mbit"], "--bandwidths: bandwidth '0mbit' must be above 0"),
    (["--bandwidths", "100000gbit"], "must be above 0 and at most 10000gbit"),
    (["--compute-scale", "inf"], "--compute-scale: compute scale must be <finite> in (0, 1000]"),
    (["--compute-scale", "1e9"], "compute scale must be in (0, 1000]"),
    (["--warmup-steps", str(10**12)], "--warmup-steps: warm-up steps must be in [0, 100000]"),
    (["--compute", "nan"], "--compute: compute must be <finite> in (0, 3600]"),
    (["--compute", "1e308"], "--compute: compute must be in (0, 3600] (seconds)"),
    (["--throughput", "inf"], "--throughput: throughput must be <finite> in (0, 1000000000]"),
    (["--throughput", "0"], "--throughput: throughput must be in (0, 1000000000]"),
    (["--intra-bandwidth", "0mbit"], "intra_bandwidth '0mbit' must be above 0"),
    (["--intra-bandwidth", "fast"], "intra_bandwidth 'fast' is not a rate"),
    (["--gpus-per-node", "1025"], "--gpus-per-node: gpus_per_node must be in [1, 1024]"),
    (["--gpus-per-node", "0"], "gpus_per_node must be in [1, 1024], got 0"),
    (["--algorithm", "butterfly"], "--algorithm: unknown algorithm 'butterfly'; valid: ring"),
    (["--selection", "topk=inf"], "selection.topk.d_log2_d must be <finite> in [0"),
    (["--selection", "topk=-1/element"], "selection.topk.per_element must be in [0, 0.001]"),
    (["--collective", "all_gather=1,nan"], "all_gather.beta must be <finite> in [0"),
    (["--collective", "all_reduce=120,0"], "all_reduce.alpha must be in [0, 60] (seconds)"),
    (["--collective", f"broadcast=0,0@{10**12}"], "broadcast.workers must be in [1, 1000000]"),
    (["--collective", "all_gather=1,1e-9@0"], "all_gather.workers must be in [1, 1000000]"),
]


@pytest.mark.parametrize(
    ("args", "message"), OPTIONS_OUT_OF_RANGE, ids=[" ".join(a) for a, _ in OPTIONS_OUT_OF_RANGE]
)
def test_the_commands_numbers_are_checked_as_they_are_parsed(args, message):
    from gradsync.cli.simulate import _parser

    with pytest.raises(ConfigError, match=_pattern(message)) as error:
        _parser().parse(["model=mlp", *args])
    assert "\n" not in str(error.value)


def test_a_directory_given_as_the_cluster_is_said_to_be_one(tmp_path):
    from gradsync.cli.simulate import _parser

    folder = tmp_path / "cluster.yaml"
    folder.mkdir()
    with pytest.raises(ConfigError, match=r"cluster.yaml is a directory; give a YAML cluster"):
        _parser().parse(["--cluster", str(folder)])


def _with_fits(
    fits: dict[str, tuple[AlphaBeta, ...]], option: list[tuple[str, AlphaBetaSpec]]
) -> tuple[argparse.Namespace, Cluster]:
    args = argparse.Namespace(collective=option, cluster=Path("c.yaml") if fits else None)
    every = dict(fits)
    for name, fit in option:
        every[name] = (*every.get(name, ()), AlphaBeta(fit.alpha, fit.beta, fit.workers))
    return args, Cluster(workers=2, bandwidth_bps=GBIT, fitted=every)


@pytest.mark.parametrize(
    ("option", "counts", "refused"),
    [
        ([("all_gather", AlphaBetaSpec(0.01, 1e-8, 16))], {2}, True),
        ([("all_gather", AlphaBetaSpec(0.01, 1e-8, 16))], {2, 16}, False),
        ([("all_gather", AlphaBetaSpec(0.01, 1e-8, None))], {2}, False),
    ],
    ids=["unused", "projected", "any"],
)
def test_a_fit_given_for_no_prediction_is_refused(option, counts, refused):
    from gradsync.cli.simulate_cluster import unused_fit

    args, _ = _with_fits({}, option)
    problem = unused_fit(args, counts)
    if not refused:
        assert problem is None
    else:
        assert problem is not None and "--collective all_gather" in problem
        assert "16 workers" in problem and f"for {', '.join(map(str, sorted(counts)))})" in problem


@pytest.mark.parametrize(
    ("file", "counts", "warned"),
    [
        ({"all_gather": (AlphaBeta(0.01, 1e-8, 16),)}, {2, 4}, True),
        ({"all_gather": (AlphaBeta(0.01, 1e-8, 16), AlphaBeta(0.01, 1e-8, 2))}, {2}, False),
        ({"all_gather": (AlphaBeta(0.01, 1e-8, 16), AlphaBeta(0.01, 1e-8))}, {2}, False),
    ],
    ids=["unused", "one-used", "any"],
)
def test_a_files_fits_for_no_prediction_are_a_warning(file, counts, warned):
    """A cluster file serves many runs (fits measured once, at the counts some project to): a
    run that uses none of a collective's fits is told so, and runs."""
    from gradsync.cli.simulate_cluster import unused_file_fits

    args, cluster = _with_fits(file, [])
    warnings = unused_file_fits(args, cluster, counts)
    assert len(warnings) == int(warned)
    if warned:
        assert "collectives.all_gather has fits at 16 workers only" in warnings[0]
        assert "\n" not in warnings[0]


def test_simulate_refuses_an_unused_fit_before_it_measures():
    from gradsync.cli.simulate import _simulate

    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"--collective all_gather=\.\.\.@16: no prediction"):
        _simulate([
            "model=mlp", "--compressors", "topk", "--schedulers", "allreduce",
            "--collective", "all_gather=0.01,1e-8@16", "--workers", "4",
        ])  # fmt: skip
    assert time.monotonic() - started < 30  # composed, not measured (a minute)
