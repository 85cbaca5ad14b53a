"""What compressors send, measured by running them (``measure/wire.py``), and the scheduler
models of ``projection/predict.py`` against hand computations and orderings that must hold."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from omegaconf import OmegaConf

from gradsync.compressors.cltk import CLTKCompressor
from gradsync.compressors.fp16 import FP16Compressor
from gradsync.compressors.none import NoneCompressor
from gradsync.compressors.terngrad import TernGradCompressor
from gradsync.compressors.threshold import ThresholdCompressor
from gradsync.compressors.topk import TopKCompressor
from gradsync.feedback.auto import for_compressor
from gradsync.measure.wire import extrapolate, measure_wire
from gradsync.projection.cluster import Cluster
from gradsync.projection.estimates import LENGTH_BYTES, LENGTHS, Job, ModelProfile, Wire
from gradsync.schedulers.costs import OVERLAPPED, SCHEDULER_MODELS, predict
from gradsync.schedulers.registry import SCHEDULERS

LAYERS = (2000, 50, 6000, 100, 1200, 10)
SHAPES = tuple((size,) for size in LAYERS)
N = sum(LAYERS)


def _wire(compressor, workers: int = 2) -> Wire:
    torch.manual_seed(0)
    return measure_wire(
        "c", compressor, for_compressor(compressor), torch.randn(N), SHAPES, workers=workers
    )


def test_a_dense_gradient_is_one_all_reduce_of_its_floats():
    wire = _wire(NoneCompressor())
    assert wire.calls == (("all_reduce", 4.0),)
    assert wire.bytes_sent(N) == 4 * N


def test_half_precision_halves_the_bytes():
    assert _wire(FP16Compressor()).bytes_sent(N) == pytest.approx(2 * N)


def test_top_k_sends_values_and_indices_of_k_elements():
    wire = _wire(TopKCompressor(density=0.01, exchange="allgather"))
    assert [kind for kind, _ in wire.calls] == ["all_gather", "all_gather"]  # values, indices
    k = int(0.01 * N)
    assert 8 * k <= wire.bytes_sent(N) <= 12 * k + 64


def test_terngrad_sends_about_two_bits_per_element():
    wire = _wire(TernGradCompressor())
    dense = 4 * N
    # 2 bits per element, scalers, and the last layer (weight + bias: 1210 elements) in float.
    assert dense / wire.bytes_sent(N) > 5
    assert wire.bytes_sent(N) >= N / 4


def test_exchange_time_grows_with_the_elements_and_includes_compression():
    wire = _wire(TopKCompressor(density=0.01, exchange="allgather"))
    cluster = Cluster(workers=8, bandwidth_bps=1e9)
    assert wire.exchange_seconds(cluster, 0) < wire.exchange_seconds(cluster, N)
    assert wire.exchange_seconds(Cluster(workers=1, bandwidth_bps=1e9), N) == pytest.approx(
        wire.compress_seconds
    )


def test_union_top_k_builds_up_with_the_workers_and_gathered_top_k_does_not():
    k_bytes = 4 * int(0.01 * N)
    values = [_wire(TopKCompressor(density=0.01), w).calls[-1] for w in (1, 2, 4)]
    assert [kind for kind, _ in values] == ["all_reduce"] * 3
    # Workers that select elsewhere: the union, and so the values all-reduced, grow n-fold.
    assert [rate * N for _, rate in values] == pytest.approx([k_bytes, 2 * k_bytes, 4 * k_bytes])
    gathered = [_wire(TopKCompressor(density=0.01, exchange="allgather"), w) for w in (2, 4)]
    assert gathered[0].calls == gathered[1].calls


def test_combining_grows_with_the_payloads_gathered():
    one = _wire(TopKCompressor(density=0.05, exchange="allgather"), 1)
    many = _wire(TopKCompressor(density=0.05, exchange="allgather"), 8)
    assert many.combine_seconds > one.combine_seconds


def test_every_repeat_measures_the_same_step_from_a_fresh_memory():
    # A threshold passes more elements once a memory holds what earlier steps left out: the
    # recorded exchange must be that of one step, as for the very first measurement.
    torch.manual_seed(0)
    gradient = torch.randn(N)
    compressor = ThresholdCompressor(density=0.01)
    feedback = for_compressor(compressor)
    wire = measure_wire("threshold", compressor, feedback, gradient, SHAPES)
    passing = int((gradient.abs() >= compressor.threshold_at(0.01, N)).sum())
    indices = next(rate for kind, rate in wire.calls if kind == "all_gather")
    assert indices * N == pytest.approx(passing * 4)  # int32 indices of one step's selection


def test_extrapolation_follows_each_calls_growth_and_stops_at_dense():
    def wire(workers: int, union: float, own: float, combine: float) -> Wire:
        calls = (("all_gather", own), ("all_reduce", union))
        return Wire("c", N, calls, 0.01, 0.01, combine_seconds=combine, workers=workers)

    larger = extrapolate(wire(4, 0.16, 0.04, 0.2), wire(8, 0.32, 0.02, 0.4), 64, element_bytes=4)
    (_, own), (_, union) = larger.calls
    assert union == pytest.approx(0.32 * 8)  # n-fold build-up
    assert own == pytest.approx(0.02 / 8)  # a shrinking share (DEFT's partitions)
    assert larger.combine_seconds == pytest.approx(0.4 * 8) and larger.workers == 64
    capped = extrapolate(wire(4, 1.0, 0.04, 0.2), wire(8, 2.0, 0.02, 0.4), 512, element_bytes=4)
    assert capped.calls[1][1] == 4.0  # never more than the dense gradient


def test_a_slower_machine_scales_every_compute_time_and_no_transfer():
    wire = _wire(TopKCompressor(density=0.01, exchange="allgather"))
    cluster = Cluster(workers=8, bandwidth_bps=1e9)
    slow = wire.scaled(10.0)
    assert slow.compress_seconds == pytest.approx(10 * wire.compress_seconds)
    assert slow.transfer_seconds(cluster, N) == wire.transfer_seconds(cluster, N)
    scaled = PROFILE.scaled(0.5)
    assert scaled.compute == pytest.approx(PROFILE.compute / 2) and scaled.sizes == PROFILE.sizes


def test_a_selection_made_while_the_others_wait_is_not_slowed_by_their_sharing_of_the_cores():
    # CLT-k's leader selects alone; Top-k's workers all select at once, sharing the cores.
    assert CLTKCompressor.selects_alone and not TopKCompressor.selects_alone
    shared = Wire("topk", N, (("all_gather", 0.08),), 0.2, 0.01, combine_seconds=0.02)
    alone = replace(shared, compressor="cltk", selects_alone=True)
    assert shared.scaled(2.5, alone=1.0).compress_seconds == pytest.approx(0.5)
    assert alone.scaled(2.5, alone=1.0).compress_seconds == pytest.approx(0.2)
    assert alone.scaled(2.5, alone=1.0).combine_seconds == pytest.approx(0.05)  # every worker
    assert alone.scaled(2.5).compress_seconds == pytest.approx(0.5)  # no alone factor given


# ---- scheduler models --------------------------------------------------------------------------
PROFILE = ModelProfile(
    model="toy",
    sizes=(40_000, 1_000, 400_000, 2_000, 1_600_000, 64),
    forward=(0.001, 0.0005, 0.004, 0.0005, 0.01, 0.0001),
    backward=(0.002, 0.001, 0.008, 0.001, 0.02, 0.0002),
    update=0.001,
    data=0.0,
    batch_size=32,
    element_bytes=4,
)
DENSE = Wire(
    compressor="none", numel=PROFILE.numel, calls=(("all_reduce", 4.0),), compress_seconds=0.0,
    density=1.0,
)  # fmt: skip
SPARSE = Wire(
    compressor="threshold", numel=PROFILE.numel, calls=((LENGTHS, 0.0), ("all_gather", 0.08)),
    compress_seconds=0.004, density=0.01,
)  # fmt: skip
OPTIONS = {  # options set for the toy model (sizes, a rule); every other scheduler: defaults
    "wfbp": {"bucket_mb": 1.0},
    "bytescheduler": {"partition_size": 200_000, "credit": 400_000},
    "deft": {"partition_size": 500_000, "links": 1},
    "mgs": {"threshold": 8192},
    "omgs": {"rule": "optimal"},
    "ssp": {"staleness": 3},
    "osp": {"max_unimportant": 0.8},
}


def _options(scheduler: str) -> dict:
    return OPTIONS.get(scheduler, {})


def _where(**capabilities: bool) -> list[str]:
    """The registered schedulers whose capabilities are those given."""
    return [
        name
        for name, spec in SCHEDULERS.items()
        if all(getattr(spec.capabilities, key) == value for key, value in capabilities.items())
    ]


OVERLAPPED_ALLREDUCES = _where(overlaps_backward=True, allreduces=True)
"""Buckets or partitions all-reduced while backward runs (the simulator's schedules)."""


def _job(wire: Wire, cluster: Cluster, **scheduler) -> Job:
    return Job(PROFILE, cluster, wire, OmegaConf.create(scheduler))


def test_passes_given_their_totals_keep_the_profiles_spread():
    forward, backward = sum(PROFILE.forward), sum(PROFILE.backward)
    later = PROFILE.with_passes(2 * forward, backward / 2)
    assert sum(later.forward) == pytest.approx(2 * forward)
    assert sum(later.backward) == pytest.approx(backward / 2)
    assert later.forward[2] / later.forward[4] == pytest.approx(
        PROFILE.forward[2] / PROFILE.forward[4]
    )
    assert later.update == PROFILE.update and later.sizes == PROFILE.sizes
    idle = replace(PROFILE, forward=(0.0,) * len(PROFILE.sizes)).with_passes(0.6, backward)
    assert idle.forward == pytest.approx((0.1,) * len(PROFILE.sizes))  # nothing to spread by


def test_a_later_forward_end_delays_the_exchanges_that_wait_for_it():
    # The same compute in all, but the last worker ends its forward later: backward's buckets
    # are ready later, so overlapped schedules end no sooner; the flat all-reduce is unchanged.
    cluster = Cluster(workers=8, bandwidth_bps=1e9)
    forward, backward = sum(PROFILE.forward), sum(PROFILE.backward)
    shifted = PROFILE.with_passes(forward + backward / 2, backward / 2)
    # DeFT sizes its knapsacks from the passes, so a longer forward changes its plan too.
    for scheduler in set(OVERLAPPED_ALLREDUCES) - {"deft"}:
        job = _job(DENSE, cluster, **_options(scheduler))
        late = replace(job, profile=shifted)
        assert predict(scheduler, late).iteration >= predict(scheduler, job).iteration - 1e-9
    wfbp = _job(DENSE, cluster, **_options("wfbp"))
    assert (
        predict("wfbp", replace(wfbp, profile=shifted)).iteration > predict("wfbp", wfbp).iteration
    )
    flat = _job(DENSE, cluster)
    assert predict("allreduce", replace(flat, profile=shifted)).iteration == pytest.approx(
        predict("allreduce", flat).iteration
    )


def test_every_scheduler_has_a_model():
    assert set(SCHEDULERS) == set(SCHEDULER_MODELS)
    assert set(OPTIONS) <= set(SCHEDULERS)  # no options for a scheduler that is gone


@pytest.mark.parametrize("scheduler", list(SCHEDULERS))
def test_every_model_prices_the_toy_job_with_its_options(scheduler):
    cluster = Cluster(workers=8, bandwidth_bps=1e9)
    estimate = predict(scheduler, _job(DENSE, cluster, **_options(scheduler)))
    # Both passes every iteration; the update on those that apply one (DeFT merges some).
    passes = sum(PROFILE.forward) + sum(PROFILE.backward)
    least = passes + PROFILE.update * estimate.updates_per_iteration
    assert math.isfinite(estimate.iteration) and estimate.iteration >= least - 1e-12


def test_the_flat_all_reduce_is_compute_then_the_whole_exchange():
    cluster = Cluster(workers=8, bandwidth_bps=1e9)
    expected = PROFILE.compute + cluster.all_reduce(4 * PROFILE.numel)
    assert predict("allreduce", _job(DENSE, cluster)).iteration == pytest.approx(expected)


@pytest.mark.parametrize("scheduler", _where(parameter_server=False))
def test_with_one_worker_nothing_is_exchanged(scheduler):
    job = _job(DENSE, Cluster(workers=1, bandwidth_bps=1e9), **_options(scheduler))
    assert predict(scheduler, job).iteration == pytest.approx(PROFILE.compute, rel=1e-6)


@pytest.mark.parametrize("rate", [1e8, 1e9, 1e10])
def test_overlapping_never_loses_to_the_flat_all_reduce_nor_beats_its_bounds(rate):
    cluster = Cluster(workers=8, bandwidth_bps=rate)
    flat = predict("allreduce", _job(DENSE, cluster)).iteration
    comm = cluster.all_reduce(4 * PROFILE.numel)
    # Those that all-reduce while backward runs and apply every gradient at once (DeFT delays).
    for scheduler in _where(overlaps_backward=True, allreduces=True, equals_allreduce=True):
        t = predict(scheduler, _job(DENSE, cluster, **_options(scheduler))).iteration
        assert t <= flat * (1 + 1e-9), scheduler
        assert t >= max(PROFILE.compute, comm) * (1 - 1e-9), scheduler


def test_usbyte_plans_from_the_equal_partitions_its_engine_profiles():
    # The engine times partitions of scheduler.max_partition_size elements and plans its
    # messages from them: the model simulates those partitions, not another family's buckets.
    cluster = Cluster(workers=8, bandwidth_bps=1e9)
    for size in (250_000, 1_000_000, 4_000_000):
        simulated = predict("usbyte", _job(DENSE, cluster, max_partition_size=size)).simulated
        assert simulated is not None
        backward = [e for e in simulated.timeline if e.label.startswith("B")]
        assert len(backward) == math.ceil(PROFILE.numel / size), size


def test_wfbp_exchanges_the_buckets_its_scheduler_forms_the_first_one_small():
    from gradsync.schedulers.pipelined.wfbp import BucketPlanner

    cluster = Cluster(workers=8, bandwidth_bps=1e9)
    options = {"bucket_mb": 25.0, "first_bucket_mb": 0.1}
    planned = BucketPlanner(25.0, 0.1).groups(PROFILE.sizes, PROFILE.element_bytes)
    assert len(planned) == 2  # the model fits in one 25 MiB bucket but for the small first one
    simulated = predict("wfbp", _job(DENSE, cluster, **options)).simulated
    assert simulated is not None
    sends = [e for e in simulated.timeline if e.stream != "compute"]
    assert len(sends) == len(planned)
    # The first bucket goes while backward still runs; with one bucket nothing overlaps.
    backward_end = max(e.end for e in simulated.timeline if e.stream == "compute")
    assert min(e.start for e in sends) < backward_end
    one = predict("wfbp", _job(DENSE, cluster, bucket_mb=25.0, first_bucket_mb=25.0)).simulated
    assert one is not None and len([e for e in one.timeline if e.stream != "compute"]) == 1


def test_the_optimal_merge_plan_is_never_slower_than_lags_mgs_or_one_group():
    cluster = Cluster(workers=16, bandwidth_bps=1e9, latency_s=1e-3)
    times = {
        s: predict(s, _job(SPARSE, cluster, **_options(s))).iteration
        for s in ("lags", "mgs", "omgs", "allreduce")
    }
    assert times["omgs"] <= min(times["lags"], times["mgs"]) * (1 + 1e-9)


def test_a_synchronous_server_adds_its_incast_and_asynchronous_ones_never_wait_longer():
    cluster = Cluster(workers=4, bandwidth_bps=1e8, latency_s=0.0)
    bsp = predict("ps_bsp", _job(DENSE, cluster)).iteration
    model_bytes = 4 * PROFILE.numel
    expected = sum(PROFILE.forward) + sum(PROFILE.backward) + PROFILE.update
    # Every worker's push through the server's link, then every worker's pull.
    assert bsp == pytest.approx(expected + (4 + 4) * model_bytes * 8 / cluster.payload_bps)
    assert predict("asp", _job(DENSE, cluster)).iteration <= bsp
    # OSP with no room for unimportant layers is BSP; with room it is never slower.
    assert predict("osp", _job(DENSE, cluster, budget=0.0)).iteration == pytest.approx(bsp)
    assert predict("osp", _job(DENSE, cluster, max_unimportant=0.8)).iteration <= bsp


def test_osp_reads_its_link_rate_as_tc_writes_it():
    """scheduler.bandwidth is a tc rate (1gbit), as OSP's server reads it for U_max: the cost
    model sizes the unimportant budget from the same rate."""
    cluster = Cluster(workers=4, bandwidth_bps=1e8, latency_s=0.0)
    options = {"max_unimportant": 0.8}
    measured = predict("osp", _job(DENSE, cluster, **options)).iteration
    given = predict("osp", _job(DENSE, cluster, bandwidth="100mbit", **options)).iteration
    assert given == pytest.approx(measured)  # the cluster's own rate, given in tc's words
    faster = predict("osp", _job(DENSE, cluster, bandwidth="10gbit", **options)).iteration
    assert faster != pytest.approx(measured)


def _wires(scheduler: str) -> list[tuple[str, Wire]]:
    """Dense, and all-gathered top-k where the scheduler takes it (it sums no payloads and
    takes compression)."""
    able = SCHEDULERS[scheduler].capabilities
    sparse = [] if able.allreduces or able.dense_only else [SPARSE]
    return [(scheduler, wire) for wire in (DENSE, *sparse)]


@pytest.mark.parametrize(
    ("scheduler", "wire"),
    [case for name in SCHEDULERS for case in _wires(name)],
    ids=lambda value: getattr(value, "compressor", value),
)
def test_pipelined_schedulers_meet_at_each_exchange_then_pay_back_to_back_calls(scheduler, wire):
    after, during = (
        {"all_gather": 0.02, "all_reduce": 0.02},
        {"all_gather": 0.001, "all_reduce": 0.001},
    )
    cluster = Cluster(workers=4, bandwidth_bps=1e9, call_s=after, overlapped_call_s=during)
    options = _options(scheduler)
    both = predict(scheduler, _job(wire, cluster, **options)).iteration

    def priced(calls: dict[str, float]) -> float:
        alone = Cluster(workers=4, bandwidth_bps=1e9, call_s=calls)
        return predict(scheduler, _job(wire, alone, **options)).iteration

    # Unpipelined, or one call per exchange (the one the workers meet at): all after-prices.
    if scheduler not in OVERLAPPED or wire is DENSE:
        assert both == pytest.approx(priced(after))
    else:  # the lengths' all-gather is the meeting; the data's follows back to back
        assert priced(during) < both < priced(after)


def test_an_exchange_pays_its_first_call_as_a_meeting_and_the_rest_back_to_back():
    cluster = Cluster(
        workers=4,
        bandwidth_bps=1e9,
        call_s={"all_gather": 0.02},
        overlapped_call_s={"all_gather": 0.001},
    ).overlapped()
    # SPARSE: the lengths' all-gather (the meeting), then the payload's; 3 peers send each.
    sent = LENGTH_BYTES + SPARSE.bytes_sent(1000)
    expected = 0.02 + 0.001 + 3 * sent * 8 / cluster.payload_bps
    assert SPARSE.transfer_seconds(cluster, 1000) == pytest.approx(expected)


@pytest.mark.parametrize("scheduler", _where(overlaps_backward=True, allreduces=False))
def test_merged_groups_exchanged_once_backward_is_over_pay_calls_on_idle_cores(scheduler):
    busy = {"all_gather": 0.02}
    computing = Cluster(workers=4, bandwidth_bps=1e9, call_s=busy, overlapped_call_s=busy)
    idle_after = replace(computing, idle_call_s={"all_gather": 0.001})
    cheap = Cluster(workers=4, bandwidth_bps=1e9, call_s={"all_gather": 0.001})
    options = _options(scheduler)
    seconds = [
        predict(scheduler, _job(SPARSE, cluster, **options)).iteration
        for cluster in (cheap, idle_after, computing)
    ]
    # The first group goes while backward runs (at the busy price), the last ones after.
    assert seconds[0] < seconds[1] < seconds[2]
    same = replace(computing, idle_call_s=busy)
    assert predict(scheduler, _job(SPARSE, same, **options)).iteration == seconds[2]


def test_deft_follows_the_buckets_and_times_the_job_solved_its_schedule_from(tmp_path):
    from gradsync.schedulers.deft.deft import BucketProfile

    cluster = Cluster(workers=4, bandwidth_bps=1e8)  # its transfers outlast compute by far
    job = _job(DENSE, cluster, partition_size=500_000)
    assert predict("deft", job).updates_per_iteration < 1.0  # DeFT delays buckets
    # The job measured transfers so short that everything fits its windows: it never delays
    # (an update every iteration), and each iteration waits for the cluster's transfers.
    fits = BucketProfile(
        bounds=(0, 500_000, 1_000_000, PROFILE.numel),
        forward=(0.01,) * 3,
        backward=(0.01,) * 3,
        comm=(1e-6,) * 3,
        mu=1.65,
    )
    planned = predict("deft", replace(job, logged_plan=fits))
    assert planned.updates_per_iteration == 1.0
    assert planned.iteration >= cluster.all_reduce(4 * PROFILE.numel)
    path = tmp_path / "deft_profile.json"  # the same plan given as scheduler.times
    fits.write(path)
    given = _job(DENSE, cluster, partition_size=500_000, times=str(path))
    assert predict("deft", given) == planned


def test_deft_on_two_links_takes_the_measured_mu_over_the_rates_ratio():
    two = dict(partition_size=500_000, links=2)
    rates = Cluster(workers=4, bandwidth_bps=5e8, second_bandwidth_bps=2.5e8)  # ratio 2
    measured = replace(rates, second_link_mu=4.0)
    by_rates = predict("deft", _job(DENSE, rates, **two))
    assert by_rates == predict("deft", _job(DENSE, rates, **two, mu=2.0))
    by_probe = predict("deft", _job(DENSE, measured, **two))
    assert by_probe == predict("deft", _job(DENSE, rates, **two, mu=4.0))
    # Communication outlasts compute: a slower second link lets DeFT update less often.
    assert by_probe.updates_per_iteration < by_rates.updates_per_iteration


def test_pipelined_schedules_compute_slower_while_a_link_is_busy():
    plain = Cluster(workers=4, bandwidth_bps=1e9)
    busy = replace(plain, busy_link_slowdown={"link 1": 1.5})
    # (US-Byte is left out: on this toy model its best plan sends after the backward pass.)
    for scheduler in ("wfbp", "bytescheduler", "deft"):
        job = _job(DENSE, plain, **_options(scheduler))
        slowed = predict(scheduler, _job(DENSE, busy, **_options(scheduler))).iteration
        assert predict(scheduler, job).iteration < slowed, scheduler
    # The flat all-reduce never computes while its link is busy.
    flat = [predict("allreduce", _job(DENSE, c)).iteration for c in (plain, busy)]
    assert flat[0] == flat[1]


def test_an_unknown_scheduler_names_the_valid_ones():
    with pytest.raises(ValueError, match="valid: allreduce, wfbp"):
        predict("gossip", _job(DENSE, Cluster(workers=2, bandwidth_bps=1e9)))


def test_omgs_plans_with_the_fit_the_job_made_as_with_a_costs_file(tmp_path):
    cluster = Cluster(workers=4, bandwidth_bps=1e9)
    latency_bound = {"gamma": 1e-9, "alpha": 1.0, "beta": 1e-12}
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps(latency_bound))
    decided = replace(_job(SPARSE, cluster, rule="optimal"), decisions=latency_bound)
    given = _job(SPARSE, cluster, rule="optimal", costs=str(costs))
    assert predict("omgs", decided) == predict("omgs", given)
    # A second per exchange makes one group the plan: priced with the cluster's own costs.
    assert predict("omgs", given).iteration == pytest.approx(
        predict("allreduce", _job(SPARSE, cluster)).iteration, rel=1e-4
    )


def test_deft_takes_the_jobs_own_mu_and_capacity_scale():
    two = dict(partition_size=200_000, links=2)
    cluster = Cluster(workers=4, bandwidth_bps=5e8, second_bandwidth_bps=2.5e8)
    decided = replace(_job(DENSE, cluster, **two), decisions={"mu": 3.0, "capacity_scale": 1.0})
    assert predict("deft", decided) == predict("deft", _job(DENSE, cluster, **two, mu=3.0))
    # Larger knapsacks delay fewer buckets: the job updates more often.
    one = _job(DENSE, cluster, partition_size=200_000)
    scaled = replace(one, decisions={"capacity_scale": 2.0})
    more, fewer = predict("deft", scaled), predict("deft", one)
    assert more.updates_per_iteration > fewer.updates_per_iteration


def test_the_decisions_a_run_logged_are_read_from_its_first_record_with_all_of_them():
    from gradsync.measure.planning import logged_decisions

    records = [
        {"step": 5, "sched/groups": 62.0},
        {"step": 10, "sched/alpha": 0.03, "sched/beta": 0.0, "sched/gamma": 3e-7},  # no δ
        {
            "step": 15,
            "sched/alpha": 0.04,
            "sched/beta": 0.0,
            "sched/gamma": 3e-7,
            "sched/delta": 1e-4,
        },
        {
            "step": 20,
            "sched/alpha": 0.05,
            "sched/beta": 1e-8,
            "sched/gamma": 3e-7,
            "sched/delta": 0,
        },
    ]
    fit = {"gamma": 3e-7, "delta": 1e-4, "alpha": 0.04, "beta": 0.0}
    assert logged_decisions(records, "omgs") == fit
    assert logged_decisions(records, "deft") == {}  # logged none
    assert logged_decisions(records, "wfbp") == {}  # decides nothing


def test_a_deft_runs_own_bucket_plan_is_read_from_its_directory(tmp_path):
    from gradsync.measure.planning import logged_plan
    from gradsync.schedulers.deft.deft import PROFILE_FILE, BucketProfile

    assert logged_plan(tmp_path, "deft") is None  # not a DeFT run
    plan = BucketProfile(
        bounds=(0, 10, 20), forward=(0.1, 0.2), backward=(0.3, 0.4), comm=(0.5, 0.6), mu=1.7
    )
    plan.write(tmp_path / PROFILE_FILE)
    assert logged_plan(tmp_path, "deft") == plan
    # Schedulers that leave no plan read none, whatever the directory holds.
    leave_none = [name for name, spec in SCHEDULERS.items() if spec.plan_reader is None]
    assert leave_none and all(logged_plan(tmp_path, name) is None for name in leave_none)
