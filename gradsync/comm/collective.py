"""Collectives over a real torch.distributed ProcessGroup that count every byte they move.

Two counts are kept per step:
* ``payload`` bytes: what this worker hands to collectives (a compressor's output). This is
  ``comm/bytes_sent``, the figure compression ratios are computed from.
* ``wire`` bytes: what this worker transmits under the bandwidth-optimal ring algorithms
  (all-reduce 2(n-1)/n·N, all-gather (n-1)·N, broadcast N from the root, a point-to-point send
  N), ``comm/bytes_wire``. A receive counts nothing: its sender counted the bytes.
Collectives used only to aggregate metrics go through ``reduce_metrics`` and are not counted.

The counts are taken (``take_bytes``) on the training thread while a communication thread may
still be adding to them, so they are kept under a lock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor

from gradsync.comm.host_sync import host_sync
from gradsync.comm.membership import member_group, member_work, wait_all
from gradsync.types import Payload

LENGTHS_SYNC = "all_gather.lengths"
"""The host sync of an all-gather whose lengths differ between workers (``_gather_lengths``)."""


@dataclass
class ByteCount:
    payload: int = 0
    wire: float = 0.0


class ByteCounter:
    """A ``ByteCount`` that one thread adds to while another takes it: without the lock, an
    addition could land on a count that ``take`` has already handed out, and be lost."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = ByteCount()

    def add(self, payload: int, wire: float) -> None:
        with self._lock:
            self._count.payload += payload
            self._count.wire += wire

    def take(self) -> ByteCount:
        """What was added since the last call; the count starts again from zero."""
        with self._lock:
            count, self._count = self._count, ByteCount()
        return count


_REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}
_GLOO_IFNAME = "GLOO_SOCKET_IFNAME"


def _nbytes(tensor: Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _deliver(received: Tensor, tensor: Tensor) -> None:
    """A staged receive into its GPU tensor, queued on the current stream (the pinned buffer is
    kept until the copy is done); nothing when it was received in place."""
    if received is not tensor:
        tensor.copy_(received, non_blocking=True)


def second_link_interface() -> str | None:
    """The interface of this worker's second link, when the runner gave it one
    (``runner.second_bandwidth`` under ``runner=netem``), else None."""
    return os.environ.get("GRADSYNC_SECOND_IFNAME") or None


@contextmanager
def _gloo_interface(interface: str | None) -> Iterator[None]:
    """GLOO_SOCKET_IFNAME set to ``interface`` inside the block and restored after it, also
    when the block fails.

    gloo reads the variable only when a group is made, so setting it around ``new_group``
    binds that one group to the interface and leaves every other group where it is."""
    if interface is None:
        yield
        return
    previous = os.environ.get(_GLOO_IFNAME)
    os.environ[_GLOO_IFNAME] = interface
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(_GLOO_IFNAME, None)
        else:
            os.environ[_GLOO_IFNAME] = previous


class TorchCollective:
    """The gradsync ``Collective`` over one process group (``None``: the default group)."""

    def __init__(
        self,
        *,
        group: dist.ProcessGroup | None = None,
        timeout: timedelta | None = None,
    ) -> None:
        self.group = group
        self.timeout = timeout
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self._counter = ByteCounter()
        self._host_point_to_point = dist.get_backend(group) == "gloo"
        """gloo sends from host memory only: GPU tensors go through pinned host buffers."""

    def barrier(self) -> None:
        dist.barrier(group=self.group)

    def fork(self, *, interface: str | None = None) -> TorchCollective:
        """The same workers over a new process group of their own, for collectives issued from
        another thread (a pipelined scheduler's communication thread): calls on different groups
        need not be ordered against each other. Every worker must call it, in the same order.

        ``interface``: the network interface the new group talks over (such as the second link
        ``second_link_interface()`` names); honoured by gloo groups, other backends ignore it.
        """
        with _gloo_interface(interface):
            made = dist.new_group(backend=dist.get_backend(self.group), timeout=self.timeout)
        return TorchCollective(group=member_group(made), timeout=self.timeout)

    # ---- byte accounting ------------------------------------------------------------------
    def take_bytes(self) -> ByteCount:
        """Bytes counted since the last call (one step's worth), and reset the counter."""
        return self._counter.take()

    def _add(self, payload: int, wire: float) -> None:
        self._counter.add(payload, wire)

    # ---- collectives ----------------------------------------------------------------------
    def all_reduce(self, payload: Payload, *, op: str = "sum") -> Payload:
        """Sum (``op="max"``: maximum) of every tensor of the payload over workers, in place.

        Through ``dist.all_reduce``, which honours each backend's contract: gloo hands back a
        work handle to wait on, NCCL none (the collective is already ordered on the current
        stream). Calling the process group itself saved a few microseconds a call, and crashed
        under NCCL."""
        self._all_reduce_each(payload, op, async_op=False)
        return payload

    def start_all_reduce(self, payload: Payload, *, op: str = "sum") -> Callable[[], Payload]:
        """Start summing the payload over workers without waiting (the process group's own
        threads, or NCCL's stream, do the work); call the returned function to wait for the
        result (on a GPU: the calling stream waits, the host does not)."""
        works = self._all_reduce_each(payload, op, async_op=True)

        def finish() -> Payload:
            wait_all(works)
            return payload

        return finish

    def _all_reduce_each(
        self, payload: Payload, op: str, *, async_op: bool
    ) -> list[dist.Work | None]:
        """Each tensor's all-reduce, counted: the handles ``async_op`` asks for (a synchronous
        call has none to give on NCCL, and has waited where gloo gives one)."""
        reduce_op, n = _REDUCE_OPS[op], self.world_size
        works = []
        for tensor in payload:
            size = _nbytes(tensor)
            self._add(size, 2 * (n - 1) / n * size)
            works.append(dist.all_reduce(tensor, reduce_op, self.group, async_op=async_op))
        return works

    def all_gather(self, payload: Payload, *, same_shape: bool = False) -> list[Payload]:
        """Every worker's payload, in rank order.

        ``same_shape``: the caller knows that every worker's tensors have the shapes of its own
        (a fixed k, codes packed from the group's sizes), so they go as they are. Otherwise
        they may differ in length (first dimension): the workers first gather every tensor's
        length in one collective, then each tensor goes padded to the longest and is trimmed
        on arrival."""
        n = self.world_size
        lengths = self._gather_lengths(payload, same_shape=same_shape)
        gathered: list[list[Tensor]] = [[] for _ in range(n)]
        for tensor, sizes in zip(payload, lengths, strict=True):
            longest = max(sizes)
            if longest == 0:  # nobody has anything to send
                for rank in range(n):
                    gathered[rank].append(tensor[:0])
                continue
            padded = tensor
            if tensor.shape[0] < longest:
                pad = tensor.new_zeros((longest - tensor.shape[0], *tensor.shape[1:]))
                padded = torch.cat([tensor, pad])
            out = [torch.empty_like(padded) for _ in range(n)]
            self._add(_nbytes(tensor), (n - 1) * _nbytes(padded))
            dist.all_gather(out, padded.contiguous(), group=self.group)
            for rank, (received, length) in enumerate(zip(out, sizes, strict=True)):
                gathered[rank].append(received[:length])
        return [tuple(parts) for parts in gathered]

    def _gather_lengths(self, payload: Payload, *, same_shape: bool) -> list[list[int]]:
        """Per tensor of the payload, its length on every worker, in rank order. One
        collective and one host sync for the whole payload, none when the lengths are known."""
        own = [tensor.shape[0] for tensor in payload]
        if same_shape or self.world_size == 1 or not payload:
            return [[length] * self.world_size for length in own]
        mine = torch.tensor(own, dtype=torch.int64, device=payload[0].device)
        theirs = [torch.empty_like(mine) for _ in range(self.world_size)]
        self._add(_nbytes(mine), (self.world_size - 1) * _nbytes(mine))
        dist.all_gather(theirs, mine, group=self.group)
        with host_sync(LENGTHS_SYNC):  # each padded tensor's length is decided on the host
            by_rank: list[list[int]] = torch.stack(theirs).tolist()
        return [list(per_tensor) for per_tensor in zip(*by_rank, strict=True)]

    def broadcast(self, payload: Payload, *, src: int) -> Payload:
        for tensor in payload:
            size = _nbytes(tensor) if self.rank == src else 0
            self._add(size, float(size))
            dist.broadcast(tensor, src=src, group=self.group)
        return payload

    # ---- point to point (ranks of this group; a tag keeps conversations apart) ------------------
    def world(self) -> TorchCollective:
        """Every rank of the job (workers and parameter servers: the default group), for
        point-to-point with servers; it counts its own bytes."""
        return TorchCollective(timeout=self.timeout)

    def send(self, payload: Payload, *, dst: int, tag: int = 0) -> None:
        """Send every tensor of the payload to rank ``dst``, in order, waiting for each."""
        for tensor in payload:
            self._count_sent(tensor)
            dist.send(self._sendable(tensor), group=self.group, group_dst=dst, tag=tag)

    def start_send(self, payload: Payload, *, dst: int, tag: int = 0) -> Callable[[], None]:
        """``send`` without waiting (the process group's own threads do the work); call the
        returned function to wait until it is sent."""
        works = []
        for tensor in payload:
            self._count_sent(tensor)
            staged = self._sendable(tensor)
            works.append(dist.isend(staged, group=self.group, group_dst=dst, tag=tag))
        return lambda: wait_all(works)

    def recv(self, payload: Payload, *, src: int | None = None, tag: int = 0) -> int:
        """Fill the payload's tensors, in order, from rank ``src`` (None: from whichever rank
        sends first; the later tensors from that one); the sender's rank."""
        for tensor in payload:
            buffer = self._host_buffer(tensor)
            work = member_work(dist.irecv(buffer, group=self.group, group_src=src, tag=tag))
            work.wait()
            _deliver(buffer, tensor)
            if src is None:
                src = work._source_rank()
        assert src is not None, "an empty payload has no sender"
        return src

    def start_recv(self, payload: Payload, *, src: int, tag: int = 0) -> Callable[[], Payload]:
        """``recv`` from ``src`` without waiting; the returned function waits and gives the
        filled payload. Receiving counts no bytes: the sender counts them."""
        buffers = [self._host_buffer(tensor) for tensor in payload]
        works = [dist.irecv(b, group=self.group, group_src=src, tag=tag) for b in buffers]

        def finish() -> Payload:
            wait_all(works)
            for buffer, tensor in zip(buffers, payload, strict=True):
                _deliver(buffer, tensor)
            return payload

        return finish

    def _sendable(self, tensor: Tensor) -> Tensor:
        """What the group's backend sends ``tensor`` from: its ``_host_buffer`` filled with it
        (the copy waits for the current stream), or the tensor itself."""
        staged = self._host_buffer(tensor)
        return tensor if staged is tensor else staged.copy_(tensor)

    def _host_buffer(self, tensor: Tensor) -> Tensor:
        """Where the group's backend reads or writes ``tensor``'s bytes: pinned host memory of
        its shape for a GPU tensor under gloo, else the tensor itself."""
        if not (self._host_point_to_point and tensor.is_cuda):
            return tensor
        return torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)

    def _count_sent(self, tensor: Tensor) -> None:
        """One copy of the tensor goes on the wire, to one peer."""
        self._add(_nbytes(tensor), float(_nbytes(tensor)))

    # ---- uncounted: metrics only ------------------------------------------------------------
    def reduce_metrics(
        self, values: Sequence[float], *, device: torch.device, op: str = "sum"
    ) -> list[float]:
        """Sum (``op="max"``: maximum) of scalars over workers for logging; not part of any
        method's traffic."""
        if self.world_size == 1:
            return list(values)
        buf = torch.tensor(list(values), dtype=torch.float64, device=device)
        dist.all_reduce(buf, op=_REDUCE_OPS[op], group=self.group)
        return buf.tolist()
