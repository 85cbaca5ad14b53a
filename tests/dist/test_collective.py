"""TorchCollective over real gloo ranks: results are right and every byte is counted."""

from __future__ import annotations

import time

import pytest
import torch

from gradsync.comm.collective import TorchCollective
from gradsync.compressors.randomk import RandomKCompressor
from gradsync.feedback.residual import ResidualFeedback
from gradsync.schedulers.allreduce.allreduce import AllreduceSync
from tests.helpers.dist import run_world

pytestmark = pytest.mark.dist


def _exercise(rank: int, world_size: int) -> dict:
    coll = TorchCollective()
    summed = coll.all_reduce((torch.full((100,), float(rank + 1)),))[0]
    after_reduce = coll.take_bytes()
    # Ragged: rank r sends r+2 elements.
    gathered = coll.all_gather((torch.arange(rank + 2, dtype=torch.float32),))
    after_gather = coll.take_bytes()
    metric = coll.reduce_metrics([1.0, float(rank)], device=torch.device("cpu"))
    after_metrics = coll.take_bytes()
    return {
        "summed": summed,
        "reduce_bytes": after_reduce,
        "gathered": [g[0] for g in gathered],
        "gather_bytes": after_gather,
        "metric": metric,
        "metric_bytes": after_metrics,
    }


def test_all_reduce_all_gather_and_byte_counts(tmp_path):
    n = 3
    results = run_world(_exercise, n, tmp_path)
    for rank, r in enumerate(results):
        torch.testing.assert_close(r["summed"], torch.full((100,), float(sum(range(1, n + 1)))))
        assert r["reduce_bytes"].payload == 400
        assert r["reduce_bytes"].wire == pytest.approx(2 * (n - 1) / n * 400)
        assert [g.tolist() for g in r["gathered"]] == [list(range(k + 2)) for k in range(n)]
        # own payload + the length exchange (one int64), as sent by this rank
        assert r["gather_bytes"].payload == (rank + 2) * 4 + 8
        longest = (n - 1 + 2) * 4
        assert r["gather_bytes"].wire == pytest.approx((n - 1) * longest + (n - 1) * 8)
        assert r["metric"] == [float(n), float(sum(range(n)))]
        assert r["metric_bytes"].payload == 0  # metric traffic is not a method's traffic


def _randomk_step(rank: int, world_size: int) -> dict:
    torch.manual_seed(100 + rank)
    model = torch.nn.Linear(50, 4)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    grads = [torch.randn_like(p) for p in model.parameters()]
    for p, g in zip(model.parameters(), grads, strict=True):
        p.grad = g.clone()
    before = [p.detach().clone() for p in model.parameters()]
    feedback = ResidualFeedback()
    sync = AllreduceSync(
        compressor=RandomKCompressor(density=0.1, seed=3),
        feedback=feedback,
        collective=TorchCollective(),
        clock=time.perf_counter,
    )
    sync.attach(model, opt)
    stats = sync.step(step=7)
    after = zip(before, model.parameters(), strict=True)
    update = torch.cat([(b - p.detach()).reshape(-1) for b, p in after])
    return {
        "grad": torch.cat([g.reshape(-1) for g in grads]),
        "update": update,
        "stats": stats,
        "residual": feedback.state_dict()["all"],
    }


def test_randomk_averages_the_same_k_elements_of_every_worker(tmp_path):
    n = 2
    results = run_world(_randomk_step, n, tmp_path)
    numel = results[0]["grad"].numel()
    k = int(0.1 * numel)
    mean_grad = sum(r["grad"] for r in results) / n
    for r in results:
        chosen = r["update"] != 0
        assert int(chosen.sum()) == k
        # lr=1, plain SGD: the update is exactly the averaged gradient on the chosen elements
        torch.testing.assert_close(r["update"][chosen], mean_grad[chosen])
        # residual = what this worker did not send
        torch.testing.assert_close(r["residual"][~chosen], r["grad"][~chosen])
        assert torch.count_nonzero(r["residual"][chosen]) == 0
        assert r["stats"].density_actual == pytest.approx(k / numel)
        assert r["stats"].density_setup == 0.1
        assert r["stats"].bytes_sent == k * 4
        assert r["stats"].error_norm == pytest.approx(float(r["residual"].norm()), rel=1e-6)
    assert torch.equal(results[0]["update"] != 0, results[1]["update"] != 0)


def _point_to_point(rank: int, world_size: int) -> dict:
    """Rank 0 sends to rank 1 (blocking) and rank 2 sends without waiting; rank 1 takes the
    first from whichever sends first and the second from rank 2; then each side's counts."""
    coll = TorchCollective()
    out: dict = {}
    if rank == 0:
        coll.send((torch.ones(10), torch.arange(3)), dst=1, tag=7)
    elif rank == 2:
        coll.start_send((torch.full((5,), 2.0, dtype=torch.float64),), dst=1, tag=8)()
    else:
        first = (torch.empty(10), torch.empty(3, dtype=torch.int64))
        out["sender"] = coll.recv(first, tag=7)
        out["first"] = [t.tolist() for t in first]
        second = coll.start_recv((torch.empty(5, dtype=torch.float64),), src=2, tag=8)()
        out["second"] = second[0].tolist()
    out["bytes"] = coll.take_bytes()
    return out


def test_send_and_recv_deliver_in_order_and_only_the_sender_counts(tmp_path):
    results = run_world(_point_to_point, 3, tmp_path)
    receiver = results[1]
    assert receiver["sender"] == 0
    assert receiver["first"] == [[1.0] * 10, [0, 1, 2]]
    assert receiver["second"] == [2.0] * 5
    assert (receiver["bytes"].payload, receiver["bytes"].wire) == (0, 0.0)
    assert (results[0]["bytes"].payload, results[0]["bytes"].wire) == (10 * 4 + 3 * 8, 64.0)
    assert (results[2]["bytes"].payload, results[2]["bytes"].wire) == (5 * 8, 40.0)


def _world_of_a_workers_group(rank: int, world_size: int) -> dict:
    """Workers 0 and 1 in a group of their own reach rank 2 (a server) through ``world()``."""
    workers = torch.distributed.new_group(ranks=[0, 1])
    if rank == 2:
        pushed = torch.empty(4)
        return {"sender": TorchCollective().recv((pushed,)), "pushed": pushed.tolist()}
    coll = TorchCollective(group=workers)
    world = coll.world()
    if rank == 0:
        world.send((torch.full((4,), 3.0),), dst=2)
    return {"sizes": (coll.world_size, world.world_size), "bytes": world.take_bytes().payload}


def test_world_reaches_the_ranks_outside_a_group(tmp_path):
    results = run_world(_world_of_a_workers_group, 3, tmp_path)
    assert results[0] == {"sizes": (2, 3), "bytes": 16}
    assert results[1] == {"sizes": (2, 3), "bytes": 0}
    assert results[2] == {"sender": 0, "pushed": [3.0] * 4}


def _counting_all_gathers(calls: list) -> object:
    """Wrap ``torch.distributed.all_gather`` so that every call records (dtype, shape) of what
    this rank sends; returns the original."""
    real = torch.distributed.all_gather

    def counting(tensor_list, tensor, group=None, async_op=False):
        calls.append((str(tensor.dtype), tuple(tensor.shape)))
        return real(tensor_list, tensor, group=group, async_op=async_op)

    torch.distributed.all_gather = counting
    return real


def _gather_recorded(rank: int, world_size: int, same_shape: bool) -> dict:
    coll = TorchCollective()
    if same_shape:  # what a fixed-k top-k or a packed quantizer sends
        payload = (
            torch.full((5,), float(rank)),
            torch.arange(5, dtype=torch.int32) + rank,
            torch.full((2, 3), float(rank), dtype=torch.float64),
        )
    else:  # lengths differ between ranks, are zero on some, and on all of them for the last
        payload = (
            torch.arange(rank, dtype=torch.float32),
            torch.full((2 * (world_size - 1 - rank), 2), rank, dtype=torch.int64),
            torch.empty(0, 4),
        )
    calls: list = []
    real = _counting_all_gathers(calls)
    try:
        gathered = coll.all_gather(payload, same_shape=same_shape)
    finally:
        torch.distributed.all_gather = real
    return {
        "gathered": [[t.tolist() for t in p] for p in gathered],
        "shapes": [[tuple(t.shape) for t in p] for p in gathered],
        "calls": calls,
        "bytes": coll.take_bytes(),
    }


def test_an_all_gather_of_equal_shapes_sends_each_tensor_once_and_no_lengths(tmp_path):
    n = 3
    results = run_world(_gather_recorded, n, tmp_path, True)
    for r in results:
        assert r["calls"] == [
            ("torch.float32", (5,)),
            ("torch.int32", (5,)),
            ("torch.float64", (2, 3)),
        ]
        assert r["gathered"] == [
            [[float(k)] * 5, list(range(k, k + 5)), [[float(k)] * 3] * 2] for k in range(n)
        ]
        sent = 5 * 4 + 5 * 4 + 6 * 8  # the payload only: no length was exchanged
        assert r["bytes"].payload == sent
        assert r["bytes"].wire == pytest.approx((n - 1) * sent)


def test_an_all_gather_of_varying_lengths_exchanges_them_once_per_payload(tmp_path):
    n = 3
    results = run_world(_gather_recorded, n, tmp_path, False)
    for rank, r in enumerate(results):
        # One handshake with all three lengths, then the two tensors someone has elements of.
        assert r["calls"] == [
            ("torch.int64", (3,)),
            ("torch.float32", (n - 1,)),
            ("torch.int64", (2 * (n - 1), 2)),
        ]
        assert r["shapes"] == [[(k,), (2 * (n - 1 - k), 2), (0, 4)] for k in range(n)]
        assert r["gathered"] == [
            [list(map(float, range(k))), [[k, k]] * (2 * (n - 1 - k)), []] for k in range(n)
        ]
        sent = 4 * rank + 32 * (n - 1 - rank)
        assert r["bytes"].payload == sent + 3 * 8  # this rank's tensors and its three lengths
        padded = 4 * (n - 1) + 32 * (n - 1)
        assert r["bytes"].wire == pytest.approx((n - 1) * (padded + 3 * 8))
