"""The α-β collective costs of ``gradsync.projection.cluster`` against their formulas, the
TernGrad appendix B model, and their monotonicity (docs/methods/index.md, "Collectives: α-β
costs")."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gradsync.projection.cluster import TCP_PAYLOAD_SHARE, Cluster

GBIT = 1e9
PAYLOAD_BPS = GBIT * TCP_PAYLOAD_SHARE  # what a 1 Gbit/s link carries of TCP payload
M = 100e6  # bytes: a 25M-parameter float32 gradient


def test_ring_all_reduce_moves_two_n_minus_one_over_n_of_the_message():
    c = Cluster(workers=8, bandwidth_bps=GBIT, latency_s=1e-4)
    assert c.all_reduce(M) == pytest.approx(14 * 1e-4 + 14 / 8 * M * 8 / PAYLOAD_BPS)
    assert Cluster(workers=1, bandwidth_bps=GBIT).all_reduce(M) == 0.0


def test_tree_all_reduce_is_appendix_b_between_machines():
    c = Cluster(workers=16, bandwidth_bps=GBIT, latency_s=1e-4, algorithm="tree")
    assert c.all_reduce(M) == pytest.approx(math.log2(16) * (1e-4 + M * 8 / PAYLOAD_BPS))


def test_appendix_b_hierarchy_adds_the_intra_node_term():
    flat = Cluster(workers=4, bandwidth_bps=GBIT, latency_s=1e-4, algorithm="tree")
    nodes = Cluster(
        workers=32,
        bandwidth_bps=GBIT,
        latency_s=1e-4,
        algorithm="tree",
        gpus_per_node=8,
        intra_bandwidth_bps=100 * GBIT,
    )
    # t_intra = log2(N_g)·M/B_g, t_inter = log2(N_m)·(λ + M/B_n) with N_m = 4 machines.
    assert nodes.all_reduce(M) == pytest.approx(3 * M * 8 / (100 * GBIT) + flat.all_reduce(M))


@pytest.mark.parametrize("algorithm", ["ring", "tree"])
@pytest.mark.parametrize("workers", [2, 16, 512])
def test_faster_links_and_smaller_messages_never_cost_more(algorithm, workers):
    rates = [GBIT, 10 * GBIT, 100 * GBIT]
    for op in ("all_reduce", "all_gather", "broadcast"):
        times = [
            getattr(Cluster(workers=workers, bandwidth_bps=r, algorithm=algorithm), op)(M)
            for r in rates
        ]
        assert times == sorted(times, reverse=True), op
    c = Cluster(workers=workers, bandwidth_bps=GBIT, algorithm=algorithm)
    terngrad, floats = M / 16 + 4 * 161, M  # 2 bits per element plus a scaler per tensor
    assert c.all_reduce(terngrad) < c.all_reduce(floats)


def test_all_gather_sends_every_payload_and_tree_saves_start_ups():
    ring = Cluster(workers=16, bandwidth_bps=GBIT, latency_s=1e-3)
    tree = Cluster(workers=16, bandwidth_bps=GBIT, latency_s=1e-3, algorithm="tree")
    m = 1e6
    assert ring.all_gather(m) == pytest.approx(15 * 1e-3 + 15 * m * 8 / PAYLOAD_BPS)
    assert tree.all_gather(m) == pytest.approx(4 * 1e-3 + 15 * m * 8 / PAYLOAD_BPS)


def test_parameter_servers_carry_every_workers_traffic():
    one = Cluster(workers=8, bandwidth_bps=GBIT, latency_s=0.0)
    two = Cluster(workers=8, bandwidth_bps=GBIT, latency_s=0.0, servers=2)
    # Fair sharing: all pushes through the server's link, then all pulls.
    assert one.push_pull(M, M) == pytest.approx(8 * 2 * M * 8 / PAYLOAD_BPS)
    assert one.push_pull(M, M / 4) == pytest.approx(8 * 1.25 * M * 8 / PAYLOAD_BPS)
    assert two.push_pull(M, M) == pytest.approx(one.push_pull(M, M) / 2)
    assert one.servers_busy(M, M / 4) == pytest.approx(8 * 1.25 * M * 8 / PAYLOAD_BPS)
    assert one.own_push_pull(M, M) == pytest.approx(2 * M * 8 / PAYLOAD_BPS)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"workers": 0}, "workers must be >= 1"),
        ({"bandwidth_bps": 0.0}, "bandwidth must be > 0"),
        ({"algorithm": "butterfly"}, "valid: ring, tree"),
        ({"gpus_per_node": 3}, "divide the 8 workers"),
        ({"gpus_per_node": 4}, "needs intra_bandwidth"),
        ({"latency_s": -1.0}, "latency must be >= 0"),
    ],
)
def test_a_bad_cluster_says_what_is_wrong(fields, message):
    with pytest.raises(ValueError, match=message):
        Cluster(**{"workers": 8, "bandwidth_bps": GBIT, **fields})


def test_a_measured_start_up_replaces_the_formulas_latency():
    c = Cluster(workers=4, bandwidth_bps=GBIT, call_s={"all_gather": 0.002})
    assert c.all_gather(1e6) == pytest.approx(0.002 + 3 * 1e6 * 8 / PAYLOAD_BPS)
    assert c.all_reduce(1e6) == pytest.approx(6 * c.latency_s + 1.5 * 1e6 * 8 / PAYLOAD_BPS)


def test_calls_made_while_computing_are_priced_apart():
    c = Cluster(
        workers=4,
        bandwidth_bps=GBIT,
        call_s={"all_gather": 0.008},
        overlapped_call_s={"all_gather": 0.003},
    )
    assert c.overlapped().all_gather(0) == pytest.approx(0.003)
    assert c.all_gather(0) == pytest.approx(0.008)
    # An exchange's first call is where the workers meet: priced as a call after computing.
    assert c.overlapped().meeting().all_gather(0) == pytest.approx(0.008)
    assert c.meeting() == c
    plain = Cluster(workers=4, bandwidth_bps=GBIT, call_s={"all_gather": 0.008})
    assert plain.overlapped() == plain  # nothing measured: the same prices
    assert plain.idle() == plain
    # Back to back once nobody computes: the idle price, with no meeting (all are waiting).
    idle = replace(c, idle_call_s={"all_gather": 0.001}).overlapped().idle()
    assert idle.all_gather(0) == pytest.approx(0.001)
    assert idle.meeting().all_gather(0) == pytest.approx(0.001)


@pytest.mark.parametrize(
    ("workers", "threads", "cores", "slowdown"),
    [(4, 1, 2, 2.0), (2, 1, 2, 1.0), (1, 1, 2, 1.0), (2, 2, 2, 2.0), (8, 1, None, 1.0)],
)
def test_workers_outnumbering_a_shared_hosts_cores_compute_slower(
    workers, threads, cores, slowdown
):
    c = Cluster(
        workers=workers,
        bandwidth_bps=GBIT,
        shared_host_cores=cores,
        threads_per_worker=threads,
    )
    assert c.compute_slowdown == slowdown


def test_a_link_carries_its_rate_less_the_frame_headers():
    c = Cluster(workers=2, bandwidth_bps=GBIT, latency_s=0.0)
    # 1448 payload bytes of every 1514-byte frame: a 2-worker all_gather of 1448 kB takes
    # what 1514 kB take at the raw rate.
    assert c.all_gather(1448e3) == pytest.approx(1514e3 * 8 / GBIT)


@pytest.mark.parametrize(
    ("runner", "shares_host", "shapes_links"),
    [("local", True, False), ("netem", True, True), ("slurm", False, False)],
)
def test_the_runners_schema_says_where_a_job_runs_composed_or_read_back(
    runner, shares_host, shapes_links, tmp_path
):
    from omegaconf import OmegaConf

    from gradsync.jobs.compose import compose_jobs, write_resolved
    from gradsync.measure.jobs import cluster_for
    from gradsync.measure.planning import fits_here

    overrides = [f"runner={runner}", "trainer.workers=2", "scheduler=omgs", "compressor=topk"]
    (composed,) = compose_jobs(
        [*overrides, "compressor.exchange=allgather"], multirun=False, launcher_here=False
    )
    write_resolved(composed, tmp_path / "config.yaml")
    read_back = OmegaConf.load(tmp_path / "config.yaml")  # plain: as a run's directory holds it
    for cfg in (composed, read_back):
        assert (cluster_for(cfg).shared_host_cores is not None) == shares_host
        # OMGS fits its cost model in place: on shaped links here, a prediction replays it.
        assert fits_here("omgs", cfg) == shapes_links
