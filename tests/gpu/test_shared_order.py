"""The collective rules on workers that share one GPU (gloo with GPU tensors): every lockstep
scheduler, with every compressor that talks while it compresses (TernGrad, union top-k, CLT-k,
DEFT), and DeFT's one- and two-link worlds issue the same collectives in the same order on every
rank, and the compute thread never issues one beside another. The same recording worlds as on
the CPU (``tests/dist/test_collective_order.py``), with the model and its gradients on the GPU:
the communication thread's stream, its events and gloo's own copies to the host in play."""

from __future__ import annotations

import pytest

from tests.dist.test_collective_order import (
    Placed,
    compute_thread_never_beside_another,
    every_combination_the_config_allows_ran,
    record_deft_world,
    record_world,
    same_order_on_every_rank,
)
from tests.helpers.dist import SHARED_GPU
from tests.helpers.gpu import needs_gpus

pytestmark = needs_gpus(1)
WORLD_TIMEOUT_S = 600  # every case of a world in one run of up to 4 processes on one GPU


def _sharing(workers: int) -> Placed:
    return Placed(workers=workers, device=SHARED_GPU, timeout=WORLD_TIMEOUT_S)


@pytest.mark.parametrize("workers", [2, 4])
def test_lockstep_schedulers_keep_one_order_on_a_shared_gpu(tmp_path, workers):
    world = record_world(tmp_path / "lockstep", _sharing(workers))
    every_combination_the_config_allows_ran(world)
    same_order_on_every_rank(world, "records")
    compute_thread_never_beside_another(world)


@pytest.mark.parametrize("workers", [2, 4])
def test_deft_keeps_one_order_on_a_shared_gpu(tmp_path, workers):
    world = record_deft_world(tmp_path / "deft", _sharing(workers))
    same_order_on_every_rank(world, "records")
    compute_thread_never_beside_another(world)
