"""gloo with GPU tensors, as workers sharing one GPU use it (``gradsync/cluster/backends.py``): the
collectives the exchange engine issues take the tensors where they are, and point-to-point
messages, which gloo reads and writes as host memory, are staged through pinned host buffers
(``TorchCollective``). Each tensor is made by a kernel just before it is handed over, so a
collective that read it before the issuing stream had written it would see other values."""

from __future__ import annotations

import torch

from gradsync.comm.collective import TorchCollective
from tests.helpers.dist import SHARED_GPU, run_world
from tests.helpers.gpu import needs_gpus

pytestmark = needs_gpus(1)
N = 1 << 20  # large enough that a copy made too early would catch the kernel mid-way


def _made_on_gpu(rank: int) -> torch.Tensor:
    return torch.arange(N, device="cuda", dtype=torch.float32).mul_(rank + 1).add_(0.5)


def _exchanges(rank: int, world_size: int) -> dict[str, list[float]]:
    collective = TorchCollective()
    (summed,) = collective.all_reduce((_made_on_gpu(rank),))
    (gathered,) = zip(*collective.all_gather((_made_on_gpu(rank)[: 3 + rank],)), strict=True)
    (broadcast,) = collective.broadcast((_made_on_gpu(rank),), src=1)
    received = torch.empty(N, device="cuda")
    if rank == 0:
        collective.send((_made_on_gpu(rank),), dst=1, tag=7)
        waiting = collective.start_recv((received,), src=1, tag=8)
        (received,) = waiting()
    else:
        sender = collective.recv((received,), src=None, tag=7)
        assert sender == 0
        collective.start_send((_made_on_gpu(rank),), dst=0, tag=8)()
    return {
        "device": [float(summed.is_cuda and received.is_cuda)],
        "sum": [summed[-1].item(), summed.sum(dtype=torch.float64).item()],
        "gathered": [t.sum().item() for t in gathered],
        "lengths": [float(len(t)) for t in gathered],
        "broadcast": [broadcast[-1].item()],
        "received": [received[-1].item(), received.sum(dtype=torch.float64).item()],
    }


def test_gloo_carries_gpu_tensors_made_just_before(tmp_path):
    results = run_world(_exchanges, 2, tmp_path, device=SHARED_GPU)
    expected = {r: _made_on_gpu_cpu(r) for r in range(2)}
    both = expected[0] + expected[1]
    for rank, result in enumerate(results):
        assert result["device"] == [1.0]
        assert result["sum"] == [both[-1].item(), both.sum(dtype=torch.float64).item()]
        assert result["lengths"] == [3.0, 4.0]
        assert result["gathered"] == [expected[r][: 3 + r].sum().item() for r in range(2)]
        assert result["broadcast"] == [expected[1][-1].item()]
        peer = expected[1 - rank]
        assert result["received"] == [peer[-1].item(), peer.sum(dtype=torch.float64).item()]


def _made_on_gpu_cpu(rank: int) -> torch.Tensor:
    """What ``_made_on_gpu`` makes, made on the CPU."""
    return torch.arange(N, dtype=torch.float32).mul_(rank + 1).add_(0.5)
