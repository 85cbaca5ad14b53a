"""``scheduler=osp``: the workers' side of Overlapped Synchronization Parallel (SPECS §8; the
server is ``gradsync/schedulers/ps/osp_server.py``).

Step i on a worker, with the Gradient Importance Bitmap (GIB) the server sent at step i−1
(everything important at first):
1. RS: push the important layers' gradients (and the step's loss and compute time); take back
   their new global parameters and the next GIB.
2. The previous step's ICS: wait for the global change of the layers it carried, and swap it
   for the local change made then (eq. 7), in layers that are still unimportant; a layer that
   has become important was just overwritten by its global value, which includes that change.
3. LGP (eq. 6): the unimportant layers move at once by the local gradient, −η·g (plain SGD: the
   paper does not say how momentum would apply to a change that is later swapped out).
4. ICS: a background thread pushes the unimportant layers' gradients to the server and waits
   for their global change, while the next step computes.

So after every correction the corrected layers equal the server's global parameters, and with
no unimportant layers (budget 0) this is ``ps_bsp``. ``flush()`` (before evaluation and
checkpoints) waits for the last ICS and applies it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.optim import Optimizer

from gradsync.comm.membership import wait_all
from gradsync.compressors.none import NoneCompressor
from gradsync.schedulers.engine.components import SyncComponents, mark_stepped
from gradsync.schedulers.ps.groups import background
from gradsync.schedulers.ps.layout import PULL, PUSH
from gradsync.types import SyncStats


@dataclass
class _Ics:
    """One step's in-computation synchronization, in flight on a background thread."""

    layers: list[int]
    local: list[Tensor]
    """The local change each layer got at once (LGP), to be swapped for the global one."""
    thread: threading.Thread
    result: Tensor | None = None
    error: BaseException | None = None


class OspSync(SyncComponents):
    def __init__(
        self,
        *,
        protocol: str = "osp",
        max_unimportant: float = 0.8,
        umax_formula: str = "corrected",
        loss_rate: float = 0.0,
        bandwidth: str | None = None,
        budget: float | None = None,
        parameter_server: bool = True,
        server: str | None = None,
        **components: Any,
    ) -> None:
        # The split's settings are the server's (osp_server.py); a worker takes its GIB.
        super().__init__(**components)
        if not isinstance(self.compressor, NoneCompressor):
            raise ValueError("scheduler=osp pushes dense gradients: use compressor=none")
        self._params: list[nn.Parameter] = []
        self._optimizer: Optimizer | None = None
        self._gib: list[bool] = []
        self._pending: _Ics | None = None
        self._began = 0.0

    def attach(self, model: nn.Module, optimizer: Optimizer) -> None:
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._optimizer = optimizer
        self._gib = [True] * len(self._params)
        self._server = self.collective.world_size  # the one server: rank trainer.workers
        self._ics_group = background()

    def begin(self, *, step: int, epoch: int = 0) -> None:
        self._began = self.clock()

    def _layers(self, keep: bool) -> list[int]:
        return [i for i, important in enumerate(self._gib) if important == keep]

    def step(self, *, step: int, epoch: int = 0, loss: Tensor | None = None) -> SyncStats:
        assert self._optimizer is not None, "attach() before step()"
        start = self.clock()
        grads = [
            p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
            for p in self._params
        ]
        important, unimportant = self._layers(True), self._layers(False)
        dtype = self._params[0].dtype
        stamp = torch.tensor(
            [float(loss) if loss is not None else 0.0, start - self._began], dtype=dtype
        )
        push = torch.cat([*(grads[i].reshape(-1) for i in important), stamp])
        reply = torch.empty(
            sum(self._params[i].numel() for i in important) + len(self._params) + 2, dtype=dtype
        )
        works = [
            dist.isend(push, dst=self._server, tag=PUSH),
            dist.irecv(reply, src=self._server, tag=PULL),
        ]
        wait_all(works)
        synced = self.clock()
        values = reply[: reply.numel() - len(self._params) - 2]
        bitmap = reply[values.numel() : values.numel() + len(self._params)]
        following = [b != 0 for b in bitmap.tolist()]
        with torch.no_grad():
            for layer, value in zip(
                important, values.split([self._params[i].numel() for i in important]), strict=True
            ):
                self._params[layer].copy_(value.view_as(self._params[layer]))
        waited = self._correct(still_unimportant=set(unimportant))
        lr = float(self._optimizer.param_groups[0]["lr"])
        local = []
        with torch.no_grad():
            for layer in unimportant:  # LGP: the local gradient now, swapped later
                change = -lr * grads[layer]
                self._params[layer].add_(change)
                local.append(change)
        ics_bytes = 0
        if unimportant:
            payload = torch.cat([grads[i].reshape(-1) for i in unimportant])
            ics_bytes = payload.numel() * payload.element_size()
            self._start_ics(unimportant, local, payload)
        self._gib = following
        mark_stepped(self._optimizer)  # the server stepped its own
        model_bytes = sum(p.numel() * p.element_size() for p in self._params)
        rs_bytes = push.numel() * push.element_size()
        done = self.clock()
        return SyncStats(
            bytes_sent=rs_bytes + ics_bytes,
            bytes_wire=float(rs_bytes + ics_bytes),
            bytes_dense=model_bytes,
            density_setup=1.0,
            density_actual=1.0,
            error_norm=0.0,
            time_compress=0.0,
            time_comm=synced - start + waited,
            time_update=done - synced - waited,
            extra={
                "sched/rs_bytes": float(rs_bytes),
                "sched/ics_bytes": float(ics_bytes),
                "sched/unimportant_fraction": sum(
                    self._params[i].numel() * self._params[i].element_size() for i in unimportant
                )
                / model_bytes,
                "time/rs": synced - start,
                "time/ics_wait": waited,
            },
        )

    def _start_ics(self, layers: list[int], local: list[Tensor], payload: Tensor) -> None:
        ics = _Ics(layers, local, threading.Thread(target=lambda: None))

        def run() -> None:
            try:
                result = torch.empty_like(payload)
                works = [
                    dist.isend(payload, dst=self._server, tag=PUSH, group=self._ics_group),
                    dist.irecv(result, src=self._server, tag=PULL, group=self._ics_group),
                ]
                wait_all(works)
                ics.result = result
            except BaseException as exc:  # raised again on the training thread
                ics.error = exc

        ics.thread = threading.Thread(target=run, name="gradsync-osp-ics", daemon=True)
        ics.thread.start()
        self._pending = ics

    def _correct(self, still_unimportant: set[int] | None) -> float:
        """Wait for the ICS in flight and swap its global change in for the local one (in the
        layers of ``still_unimportant``; all of its layers when None). Seconds waited."""
        ics, self._pending = self._pending, None
        if ics is None:
            return 0.0
        start = self.clock()
        ics.thread.join()
        waited = self.clock() - start
        if ics.error is not None:
            raise RuntimeError(
                f"scheduler=osp: the background synchronization failed: {ics.error}"
            ) from ics.error
        assert ics.result is not None
        changes = ics.result.split([self._params[i].numel() for i in ics.layers])
        with torch.no_grad():
            for layer, local, change in zip(ics.layers, ics.local, changes, strict=True):
                if still_unimportant is None or layer in still_unimportant:
                    self._params[layer].add_(change.view_as(local) - local)
        return waited

    def flush(self) -> None:
        self._correct(still_unimportant=None)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None
