"""The parameter servers' loops (``ps/server.py``, ``ps/osp_server.py``) in one process, their
links replaced by queues of the workers' pushes (sent as ``send_payload`` sends them) and a
recorder of the replies. A server's update must be the reference arithmetic to the bit (the
mean of the pushes in rank order, or each push over N, stepped by the job's SGD), and a step
must reuse its buffers: every push received into the same memory, every reply sent from the
same memory (ps_bsp's from the shard's values themselves), and no model-sized tensor allocated
once the first step is done."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import pytest
import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from gradsync.compressors.dense import DenseCtx
from gradsync.compressors.options.base import NoneCompressorConfig
from gradsync.config.schema import TrainerConfig
from gradsync.schedulers.ps import osp_server, server
from gradsync.schedulers.ps.config import AspConfig, OspConfig, PsBspConfig
from gradsync.schedulers.ps.layout import PUSH, Shards
from gradsync.schedulers.ps.messages import send_payload
from gradsync.train.servers import serving
from tests.helpers.allocations import LargeAllocations
from tests.helpers.training import tiny_model

WORKERS, STEPS, LR, MOMENTUM, WEIGHT_DECAY = 2, 4, 0.1, 0.9, 1e-3
SERVER = WORKERS  # the one server's rank


def _flat(model: nn.Module) -> Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


NUMEL = _flat(tiny_model()).numel()


class _Links:
    """The server's links: each worker's pushes queued beforehand (``src=None`` takes them in
    ``order``); every tensor received into and every reply sent (with its values then), kept
    so that no memory is freed and handed out again during a run."""

    def __init__(self, order: list[int] | None = None, *, copies: bool = True) -> None:
        self.copies = copies  # off while allocations are counted: the copies would count
        self.queued: dict[tuple[int, int], deque[Tensor]] = defaultdict(deque)
        self.order = deque(order or [])
        self.received: list[tuple[int, Tensor]] = []  # (tag, buffer)
        self.replies: list[tuple[int, Tensor, Tensor]] = []  # (worker, buffer, values sent)

    def worker(self, rank: int) -> Any:
        links = self

        class _Sender:
            def send(self, payload: Any, *, dst: int, tag: int = 0) -> None:
                assert dst == SERVER
                for tensor in payload:
                    links.queued[(rank, tag)].append(tensor.clone())

        return _Sender()

    def push(self, rank: int, gradient: Tensor) -> None:
        send_payload(self.worker(rank), (gradient,), DenseCtx(gradient.dtype, 1), dst=SERVER)

    def recv(self, payload: Any, *, src: int | None = None, tag: int = 0) -> int:
        if src is None:
            src = self.order.popleft()
        for tensor in payload:
            tensor.copy_(self.queued[(src, tag)].popleft())
            self.received.append((tag, tensor))
        return src

    def start_recv(self, payload: Any, *, src: int, tag: int = 0) -> Callable[[], Any]:
        self.recv(payload, src=src, tag=tag)
        return lambda: payload

    def start_send(self, payload: Any, *, dst: int, tag: int = 0) -> Callable[[], None]:
        for tensor in payload:
            self.replies.append((dst, tensor, tensor.clone() if self.copies else tensor))
        return lambda: None


def _cfg(scheduler: Any, *, weight_decay: float = WEIGHT_DECAY) -> DictConfig:
    trainer = TrainerConfig(workers=WORKERS, lr=LR, momentum=MOMENTUM, weight_decay=weight_decay)
    return OmegaConf.create(
        {
            "trainer": OmegaConf.structured(trainer),
            "scheduler": OmegaConf.structured(scheduler),
            "compressor": OmegaConf.structured(NoneCompressorConfig()),
        }
    )


def _gradients(steps: int) -> list[list[Tensor]]:
    """Each step's push of each worker."""
    gen = torch.Generator().manual_seed(3)
    return [
        [torch.randn(NUMEL, generator=gen, dtype=torch.float64) for _ in range(WORKERS)]
        for _ in range(steps)
    ]


def _serve(
    monkeypatch, cfg: DictConfig, links: _Links, steps: int, counter: LargeAllocations | None
) -> list[tuple[Tensor, Tensor]]:
    """What ``after_step`` sees after each update, and a copy of its values then (nothing is
    seen while allocations are counted: the copies would count)."""
    monkeypatch.setattr(server, "TorchCollective", lambda: links)
    monkeypatch.setattr(Shards, "of_world", lambda total, workers: Shards.even(total, 1, workers))
    seen: list[tuple[Tensor, Tensor]] = []
    job = serving(
        cfg,
        server=0,
        steps_per_epoch=steps,
        total_steps=steps,
        after_step=None if counter else lambda values: seen.append((values, values.clone())),
    )
    model = tiny_model()
    if counter is None:
        server.serve(model, job)
    else:
        with counter:
            server.serve(model, job)
    return seen


def _reference(updates: list[Tensor]) -> list[Tensor]:
    """The job's SGD on the flat model, stepped by each of ``updates`` in turn."""
    values = nn.Parameter(_flat(tiny_model()))
    optimizer = torch.optim.SGD([values], lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    states = []
    for update in updates:
        values.grad = update
        optimizer.step()
        states.append(values.detach().clone())
    return states


def _storages(tensors: list[Tensor]) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors}


def test_ps_bsp_steps_by_the_mean_in_place_and_replies_from_its_values(monkeypatch):
    links, gradients = _Links(), _gradients(STEPS)
    for step in gradients:
        for rank, gradient in enumerate(step):
            links.push(rank, gradient)
    seen = _serve(monkeypatch, _cfg(PsBspConfig()), links, STEPS, None)
    means = []
    for g0, g1 in gradients:  # as the loop sums: in rank order, then over N
        total = g0.clone()
        total += g1
        means.append(total / WORKERS)
    for step, ((_, ours), expected) in enumerate(zip(seen, _reference(means), strict=True)):
        assert torch.equal(ours, expected), f"step {step}"
    # One buffer for every reply, and it is the shard's values (no copy of them is sent).
    assert len(links.replies) == STEPS * WORKERS
    assert _storages([buffer for _, buffer, _ in links.replies]) == _storages([seen[0][0]])
    for k, (_, _, sent) in enumerate(links.replies):
        assert torch.equal(sent[:NUMEL], _reference(means)[k // WORKERS])
        assert sent[NUMEL:].tolist() == [k // WORKERS + 1] * 2 + [0]  # the clocks, staleness
    # Every push's payload received into one buffer.
    payloads = [buffer for tag, buffer in links.received if tag == PUSH + 20]
    assert len(payloads) == STEPS * WORKERS and len(_storages(payloads)) == 1


def test_asp_applies_each_push_over_n_and_replies_from_one_buffer_per_worker(monkeypatch):
    order = [0, 1, 1, 0, 0, 1, 1, 0]  # the workers as their pushes arrive
    links, gradients = _Links(order), _gradients(STEPS)
    for step in gradients:
        for rank, gradient in enumerate(step):
            links.push(rank, gradient)
    seen = _serve(monkeypatch, _cfg(AspConfig(staleness_correction="none")), links, STEPS, None)
    pushed = {rank: iter([step[rank] for step in gradients]) for rank in range(WORKERS)}
    updates = [next(pushed[rank]) / WORKERS for rank in order]
    for k, ((_, ours), expected) in enumerate(zip(seen, _reference(updates), strict=True)):
        assert torch.equal(ours, expected), f"update {k}"
    for rank in range(WORKERS):
        replies = [(buffer, sent) for w, buffer, sent in links.replies if w == rank]
        assert len(replies) == STEPS and len(_storages([b for b, _ in replies])) == 1
    # Each reply carries the values right after the update of that worker's push.
    for k, rank in enumerate(order):
        sent = next(s for w, _, s in links.replies[k:] if w == rank)
        assert torch.equal(sent[:NUMEL], _reference(updates)[k])


@pytest.mark.parametrize(
    "scheduler",
    [PsBspConfig(), AspConfig(staleness_correction="none")],
    ids=["ps_bsp", "asp"],
)
def test_a_server_step_allocates_no_model_sized_tensor(monkeypatch, scheduler):
    """As many model-sized allocations in a long run as in a short one: none per step. (Without
    weight decay: torch's SGD makes the decayed gradient anew at every step, its own cost.)"""
    made = {}
    for steps in (2, 5):
        order = [rank for _ in range(steps) for rank in range(WORKERS)]
        links = _Links(order, copies=False)
        for step in _gradients(steps):
            for rank, gradient in enumerate(step):
                links.push(rank, gradient)
        counter = LargeAllocations(NUMEL * 8)
        _serve(monkeypatch, _cfg(scheduler, weight_decay=0.0), links, steps, counter)
        made[steps] = counter.ops
    assert made[5] == made[2], made


class _OspLinks(_Links):
    """Both of OSP's links: every push is 0.5 everywhere (as test_osp_server_order's)."""

    def start_recv(self, payload: Any, *, src: int, tag: int = 0) -> Callable[[], Any]:
        for tensor in payload:
            tensor.fill_(0.5)
            self.received.append((tag, tensor))
        return lambda: payload


def _serve_osp(monkeypatch, budget: float, steps: int, counter: LargeAllocations) -> _OspLinks:
    links = _OspLinks(copies=False)
    monkeypatch.setattr(osp_server, "TorchCollective", lambda: links)
    monkeypatch.setattr(osp_server, "background", lambda: links)
    cfg = _cfg(OspConfig(budget=budget), weight_decay=0.0)
    job = serving(cfg, server=0, steps_per_epoch=steps, total_steps=steps)
    with counter:
        osp_server.serve_osp(tiny_model(), job)
    return links


@pytest.mark.parametrize("budget", [0.0, 0.5])
def test_the_osp_server_reuses_its_buffers(monkeypatch, budget):
    made = {}
    for steps in (2, 5):
        counter = LargeAllocations(NUMEL * 8)  # no layer is as large as the model
        links = _serve_osp(monkeypatch, budget, steps, counter)
        made[steps] = counter.ops
    assert made[5] == made[2], made
    # Received into and sent from buffers made once (RS and ICS each: a buffer per worker
    # for the pushes, one for the replies).
    assert len(_storages([buffer for _, buffer in links.received])) <= 2 * WORKERS
    assert len(_storages([buffer for _, buffer, _ in links.replies])) <= 2
