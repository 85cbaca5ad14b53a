"""The buffers a parameter server's traffic reuses (``ps/buffers.py``) and a worker's staging
(``ps/host.py``) on the CPU, where nothing is staged: what a worker sends is its tensor itself,
and what it receives stays where gloo wrote it."""

from __future__ import annotations

import torch

from gradsync.schedulers.ps.buffers import Buffers
from gradsync.schedulers.ps.host import Staging


def _storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def test_a_key_keeps_its_memory_until_it_needs_more():
    buffers = Buffers()
    first = buffers.get("a", 100, torch.float32)
    assert first.shape == (100,) and first.dtype == torch.float32
    smaller = buffers.get("a", (4, 5), torch.float64)  # 160 bytes of the 400
    assert smaller.shape == (4, 5) and _storage(smaller) == _storage(first)
    assert _storage(buffers.get("b", 100, torch.float32)) != _storage(first)  # a key of its own
    larger = buffers.get("a", 101, torch.float32)
    assert _storage(larger) != _storage(first)
    assert _storage(buffers.get("a", 100, torch.float32)) == _storage(larger)
    assert buffers.get("a", 0, torch.float32).numel() == 0


def test_on_the_cpu_a_worker_sends_its_tensors_themselves_and_uses_what_it_received():
    staging = Staging(torch.device("cpu"))
    payload = (torch.arange(6.0), torch.arange(4))
    sent = staging.outgoing("push", payload)
    for s, p in zip(sent, payload, strict=True):  # no copy
        assert s.data_ptr() == p.data_ptr() and s.shape == p.shape
    landing = staging.landing("pull", 10, torch.float64)
    assert _storage(staging.landing("pull", 10, torch.float64)) == _storage(landing)
    assert _storage(staging.arrived("pull", landing[:8])) == _storage(landing)


def test_a_strided_tensor_is_sent_contiguous():
    staging = Staging(torch.device("cpu"))
    strided = torch.arange(12.0).view(3, 4).t()
    (sent,) = staging.outgoing("push", (strided,))
    assert sent.is_contiguous() and torch.equal(sent, strided)
