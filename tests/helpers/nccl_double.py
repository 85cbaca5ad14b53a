"""A process group that keeps NCCL's contract over gloo, so that the CPU suite runs every
collective path gradsync takes on a GPU cluster without a GPU.

Where NCCL's contract differs from gloo's and matters to gradsync, this group behaves as NCCL:

* a synchronous collective (``asyncOp`` false: ``dist.all_reduce(t)``) returns no work handle,
  since NCCL has already ordered it on the current stream; only ``async_op=True`` gets one.
  Calling ``.wait()`` on what a synchronous call returned fails here as it does on a GPU;
* every tensor of a collective or a point-to-point call is on the group's bound device (the
  host here, so a tensor left on another device is refused), dense and contiguous;
* a receive from any source is refused (NCCL has none; only gloo's servers may use it);
* an all-gather gathers tensors of the input's shape and dtype only;
* no two threads issue on one communicator at once: a second thread issuing on the same group
  while another is inside a call is refused, where NCCL would deadlock or mismatch the ranks'
  orders. (Calls from two threads at different moments pass, as they may on NCCL while the
  communication thread is idle; that the orders agree is ``test_collective_order.py``'s.)

Point-to-point calls return a work handle, as NCCL's do. What it does not model: the group's
device is the host, so a host tensor that should have been on a GPU passes (the ``meta``
device tests state that must stay on a device: ``test_state_on_device.py``); NCCL ignores
point-to-point tags, gloo matches by them; NCCL's dtype limits; streams and events, which are
the host's here. The data moves through gloo, so results are gloo's, bit for bit.

``register`` makes it a torch.distributed backend named ``BACKEND`` (``run_world``'s
``NCCL_DOUBLE`` starts the default group on it); groups made later with
``dist.new_group(backend=dist.get_backend())`` are doubles too, as gradsync's forks are.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.distributed_c10d import (
    AllgatherOptions,
    AllreduceOptions,
    BarrierOptions,
    BroadcastOptions,
)

BACKEND = "ncclcontract"
HOST = torch.device("cpu")


class ContractBroken(RuntimeError):
    """What NCCL would refuse, or where it would hang, said where it happens."""


class NcclContractGroup(dist.ProcessGroup):
    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        self._issuing = threading.Lock()
        self._issuer: str | None = None

    def getBackendName(self) -> str:
        return BACKEND

    # ---- collectives --------------------------------------------------------------------
    def allreduce(self, tensors: list[Tensor], opts: AllreduceOptions) -> dist.Work | None:
        self._check(tensors, "all_reduce")
        return self._collective(lambda: self._gloo.allreduce(tensors, opts), opts)

    def allgather(
        self,
        output_tensors: list[list[Tensor]],
        input_tensors: list[Tensor],
        opts: AllgatherOptions,
    ) -> dist.Work | None:
        self._check(input_tensors, "all_gather")
        for outputs in output_tensors:
            self._check(outputs, "all_gather")
            like = input_tensors[0]
            if any(o.shape != like.shape or o.dtype != like.dtype for o in outputs):
                raise ContractBroken("all_gather: NCCL gathers tensors of one shape and dtype")
        return self._collective(
            lambda: self._gloo.allgather(output_tensors, input_tensors, opts), opts
        )

    def broadcast(self, tensors: list[Tensor], opts: BroadcastOptions) -> dist.Work | None:
        self._check(tensors, "broadcast")
        return self._collective(lambda: self._gloo.broadcast(tensors, opts), opts)

    def barrier(self, opts: BarrierOptions) -> dist.Work | None:
        return self._collective(lambda: self._gloo.barrier(opts), opts)

    # ---- point to point -----------------------------------------------------------------
    def send(self, tensors: list[Tensor], dst: int, tag: int) -> dist.Work:
        self._check(tensors, "send")
        return self._gloo.send(tensors, dst, tag)

    def recv(self, tensors: list[Tensor], src: int, tag: int) -> dist.Work:
        self._check(tensors, "recv")
        return self._gloo.recv(tensors, src, tag)

    def recv_anysource(self, tensors: list[Tensor], tag: int) -> dist.Work:
        raise ContractBroken("recv from any source: NCCL has none (only a gloo group takes it)")

    # ---- the contract -------------------------------------------------------------------
    def _check(self, tensors: Sequence[Tensor], what: str) -> None:
        for tensor in tensors:
            if tensor.device != HOST:
                raise ContractBroken(
                    f"{what}: a tensor on {tensor.device}, the group is bound to {HOST} "
                    "(NCCL takes tensors on its own device only)"
                )
            if tensor.is_sparse or not tensor.is_contiguous():
                raise ContractBroken(f"{what}: NCCL takes dense, contiguous tensors only")

    def _collective(self, issue: Callable[[], dist.Work], opts: object) -> dist.Work | None:
        with self._one_issuer():
            work = issue()
            if getattr(opts, "asyncOp", True):
                return work
            work.wait()  # what NCCL's stream order guarantees the caller's later kernels
            return None

    @contextmanager
    def _one_issuer(self) -> Iterator[None]:
        me = threading.current_thread().name
        if not self._issuing.acquire(blocking=False):
            raise ContractBroken(
                f"a collective issued from thread {me!r} while thread {self._issuer!r} is "
                "inside one on the same communicator: NCCL needs one order per communicator"
            )
        self._issuer = me
        try:
            yield
        finally:
            self._issuer = None
            self._issuing.release()


def _make(store: dist.Store, rank: int, size: int, timeout: timedelta) -> NcclContractGroup:
    return NcclContractGroup(store, rank, size, timeout)


def register() -> None:
    """Make ``BACKEND`` a torch.distributed backend in this process (once)."""
    if BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, _make, devices=["cpu"])
