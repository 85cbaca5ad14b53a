"""``scheduler=osp``: the workers' side of Overlapped Synchronization Parallel
(docs/methods/schedulers/osp.md; the server is ``gradsync/schedulers/ps/osp_server.py``).

Step i on a worker, with the Gradient Importance Bitmap (GIB) the server sent at step i−1
(everything important at first):
1. RS: push the important layers' gradients (and the step's loss and compute time); take back
   their new global parameters and the next GIB.
2. The previous step's ICS: wait for the global change of the layers it carried, and swap it
   for the local change made then (eq. 7), in layers that are still unimportant; a layer that
   has become important was just overwritten by its global value, which includes that change.
3. LGP (eq. 6): the unimportant layers move at once by the local gradient, −η·g (plain SGD: the
   paper does not say how momentum would apply to a change that is later swapped out).
4. ICS: the unimportant layers' gradients go to the server on the background group, and their
   global change comes back, while the next step computes.

So after every correction the corrected layers equal the server's global parameters, and with
no unimportant layers (budget 0) this is ``ps_bsp``. ``flush()`` (before evaluation and
checkpoints) waits for the last ICS and applies it.

RS and ICS are each a bucket of the engine's contract (``engine/exchange.py``), exchanged
through ``exchange`` with ``compressor=none`` (the server takes dense gradients): RS's future
gives the important layers' new values and the next GIB, ICS's the global change.

Every send and receive is issued by the scheduler's one communication thread, RS and then ICS
each step. Order per communicator: the default group carries only RS (one push and one reply a
step, in step order), the background group only ICS (one a step, started only after the
previous one was waited for), and the server takes them in the same order: RS of step i, ICS
of step i, RS of step i+1. ICS stays on its own group so that its push and reply, in flight
across the next step's RS, never meet RS's messages under the same tags.

On a GPU the gradients, LGP's local change and its correction stay on the device; what RS and
ICS push goes to the host on the communication thread, and what comes back goes to the device
(``host.Staging``). The step's loss travels inside RS's push, so it is never read on the host
here. What a step's exchange passes through is made once and reused (``buffers.Buffers``):
RS's and ICS's flat gradients and RS's push on the device, their pinned copies and the replies
on the host; on the CPU nothing is staged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from typing_extensions import Unpack

from gradsync.compressors.none import NoneCompressor
from gradsync.schedulers.engine.comm_thread import CommThread
from gradsync.schedulers.engine.components import SyncComponents, mark_stepped
from gradsync.schedulers.engine.engine import EngineParts
from gradsync.schedulers.engine.exchange import Bucket
from gradsync.schedulers.engine.step_timer import StepTimer
from gradsync.schedulers.ps.buffers import Buffers
from gradsync.schedulers.ps.config import MAX_UNIMPORTANT, UMAX_FORMULA, OspConfig
from gradsync.schedulers.ps.groups import background
from gradsync.schedulers.ps.host import Staging
from gradsync.schedulers.ps.layout import CLOCKS, PULL, PUSH, shaped
from gradsync.types import Collective, GroupInfo, Payload, SyncStats


@dataclass
class _Ics:
    """One step's in-computation synchronization, in flight on the background group."""

    layers: list[int]
    local: list[Tensor]
    """The local change each layer got at once (LGP), to be swapped for the global one."""
    finish: Callable[[], Tensor]
    """The push's future (only the waiting, not the gradient pushed, kept until the next
    step): it gives the layers' global change, on the host."""


class OspSync(SyncComponents):
    def __init__(
        self,
        *,
        max_unimportant: float = MAX_UNIMPORTANT,
        umax_formula: str = UMAX_FORMULA,
        loss_rate: float = OspConfig.loss_rate,
        bandwidth: str | None = None,
        budget: float | None = None,
        server: str | None = None,
        **parts: Unpack[EngineParts],
    ) -> None:
        # The split's settings are the server's (osp_server.py); a worker takes its GIB.
        super().__init__(**parts)
        if not isinstance(self.compressor, NoneCompressor):
            raise ValueError("scheduler=osp pushes dense gradients: use compressor=none")
        self._params: list[nn.Parameter] = []
        self._optimizer: Optimizer | None = None
        self._gib: list[bool] = []
        self._pending: _Ics | None = None
        self._began = 0.0
        self._comm: CommThread | None = None
        self._timer: StepTimer | None = None
        self._staging: Staging | None = None
        self._buffers: Buffers | None = None
        """After ``attach``: RS's push (its flat gradient, then the stamp) and ICS's flat
        gradient, on the device."""
        self._routine: Collective = self.collective
        """After ``attach``: every rank over the default group (RS)."""
        self._ics: Collective = self.collective
        """After ``attach``: every rank over the background group (ICS)."""

    def attach(self, model: nn.Module, optimizer: Optimizer) -> None:
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._optimizer = optimizer
        self._gib = [True] * len(self._params)
        device = self._params[0].device
        self._comm, self._timer = self.start_comm(device)
        self._staging, self._buffers = Staging(device), Buffers(device)
        self._routine, self._ics = self.collective.world(), background()
        self._server = self.collective.world_size  # the one server: rank trainer.workers

    def begin(self, *, step: int, epoch: int = 0) -> None:
        self._began = self.clock()

    def _layers(self, keep: bool) -> list[int]:
        return [i for i, important in enumerate(self._gib) if important == keep]

    def step(self, *, step: int, epoch: int = 0, loss: Tensor | None = None) -> SyncStats:
        comm, timer = self._comm, self._timer
        assert self._optimizer is not None and comm is not None and timer is not None, "attach()"
        start = timer.mark()
        compute = self.clock() - self._began  # feeds the server's U_max: the synchronizing clock
        # The gradients themselves: whatever reads them below copies them within the step (RS's
        # and ICS's flat gradients, LGP's change).
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self._params]
        important, unimportant = self._layers(True), self._layers(False)
        device, dtype = self._params[0].device, self._params[0].dtype
        # The server's stamp (loss, compute time), made where the gradients are: the loss is
        # not read on the host here.
        seen = torch.zeros(1, device=device) if loss is None else loss.detach().reshape(1)
        stamp = [seen.to(dtype), torch.full((1,), compute, device=device, dtype=dtype)]
        # RS's flat gradient is the front of its push, the stamp after it (``_send_routine``).
        flat = self._flat("rs", grads, important, extra=len(stamp))
        routine = Bucket(0, flat, GroupInfo("rs", step, epoch))
        values, following = self.exchange(routine, partial(self._send_routine, stamp)).wait()
        synced = timer.mark()
        if important:  # batched copies and updates, not a launch per tensor
            chosen: list[Tensor] = [self._params[i] for i in important]
            with torch.no_grad():
                torch._foreach_copy_(chosen, shaped(values, chosen))
        with timer.span("ics_wait"):
            self._correct(still_unimportant=set(unimportant))
        lr = float(self._optimizer.param_groups[0]["lr"])
        if unimportant:
            moved: list[Tensor] = [self._params[i] for i in unimportant]
            with torch.no_grad():  # LGP: the local gradient now, swapped later
                local = list(torch._foreach_mul([grads[i] for i in unimportant], -lr))
                torch._foreach_add_(moved, local)
            ics = Bucket(1, self._flat("ics", grads, unimportant), GroupInfo("ics", step, epoch))
            pushed = self.exchange(ics, self._send_background)
            self._pending = _Ics(unimportant, local, pushed.finish)
        self._gib = following
        mark_stepped(self._optimizer)  # the server stepped its own
        model_bytes = sum(p.numel() * p.element_size() for p in self._params)
        timer.add("rs", start, synced)
        timer.add("after_rs", synced, timer.mark())
        seconds = timer.read()
        rs_bytes, ics_bytes = self._routine.take_bytes().payload, self._ics.take_bytes().payload
        return SyncStats(
            bytes_sent=rs_bytes + ics_bytes,
            bytes_wire=float(rs_bytes + ics_bytes),
            bytes_dense=model_bytes,
            density_setup=1.0,
            density_actual=1.0,
            error_norm=0.0,
            time_compress=0.0,
            time_comm=seconds["rs"] + seconds["ics_wait"],
            time_update=seconds["after_rs"] - seconds["ics_wait"],
            extra={
                "sched/rs_bytes": float(rs_bytes),
                "sched/ics_bytes": float(ics_bytes),
                "sched/unimportant_fraction": sum(
                    self._params[i].numel() * self._params[i].element_size() for i in unimportant
                )
                / model_bytes,
                "time/rs": seconds["rs"],
                "time/ics_wait": seconds["ics_wait"],
            },
        )

    def _send_routine(
        self, stamp: list[Tensor], bucket: Bucket, payload: Payload, ctx: Any
    ) -> Callable[[], tuple[Tensor, list[bool]]]:
        """RS's ``Send``: the important layers' gradients (the payload of compressor=none),
        with the server's stamp after them, pushed by the communication thread."""
        assert self._comm is not None, "attach() first"
        assert self._buffers is not None, "attach() first"
        (gradient,) = payload
        size = gradient.numel()
        push = self._buffers.get("rs", size + len(stamp), gradient.dtype)
        if gradient.data_ptr() != push.data_ptr():  # not the flat gradient itself: copied in
            push[:size].copy_(gradient)
        torch.cat(stamp, out=push[size:])
        stage = partial(self._routine_stage, push, size)
        return self._comm.submit(stage, inputs=push).wait

    def _send_background(self, bucket: Bucket, payload: Payload, ctx: Any) -> Callable[[], Tensor]:
        """ICS's ``Send``: the push and its reply started by the communication thread (waited
        for until they are issued, so this step counts the push's bytes), not completed; the
        future waits for both."""
        assert self._comm is not None, "attach() first"
        (gradient,) = payload
        return self._comm.submit(partial(self._start_ics, gradient), inputs=gradient).wait()

    def _routine_stage(self, push: Tensor, size: int) -> tuple[Tensor, list[bool]]:
        """On the communication thread: RS's push, then the server's reply (once it has every
        worker's push): the ``size`` new values of the important layers, on the device, and
        the next GIB (read on the host, where the reply lands)."""
        staging = self._staging
        assert staging is not None, "attach() first"
        (staged,) = staging.outgoing("rs-push", (push,))
        reply = staging.landing("rs", size + len(self._params) + CLOCKS, push.dtype)
        self._routine.send((staged,), dst=self._server, tag=PUSH)
        self._routine.recv((reply,), src=self._server, tag=PULL)
        bitmap = reply[size : size + len(self._params)].tolist()
        return staging.arrived("rs", reply[:size]), [b != 0 for b in bitmap]

    def _start_ics(self, payload: Tensor) -> Callable[[], Tensor]:
        """On the communication thread: start ICS's push and its reply without waiting; the
        function that waits for both and gives the global change (on the host). Its buffers
        are reused by the next ICS, which starts only once this one was waited for."""
        staging = self._staging
        assert staging is not None, "attach() first"
        (pushed,) = staging.outgoing("ics-push", (payload,))
        result = staging.landing("ics", pushed.numel(), pushed.dtype)
        sent = self._ics.start_send((pushed,), dst=self._server, tag=PUSH)
        received = self._ics.start_recv((result,), src=self._server, tag=PULL)

        def finish() -> Tensor:
            sent()
            return received()[0]

        return finish

    def _correct(self, still_unimportant: set[int] | None) -> None:
        """Wait for the ICS in flight and swap its global change in for the local one (in the
        layers of ``still_unimportant``; all of its layers when None)."""
        ics, self._pending = self._pending, None
        if ics is None:
            return
        try:
            result = ics.finish()
        except Exception as exc:
            raise RuntimeError(
                f"scheduler=osp: the background synchronization failed: {exc}"
            ) from exc
        assert self._staging is not None, "attach() first"
        changes = shaped(self._staging.arrived("ics", result), ics.local)
        kept = [
            k for k, layer in enumerate(ics.layers)
            if still_unimportant is None or layer in still_unimportant
        ]  # fmt: skip
        if not kept:
            return
        corrected: list[Tensor] = [self._params[ics.layers[k]] for k in kept]
        with torch.no_grad():
            swaps = torch._foreach_sub([changes[k] for k in kept], [ics.local[k] for k in kept])
            torch._foreach_add_(corrected, swaps)

    def _flat(self, name: str, grads: list[Tensor], layers: list[int], *, extra: int = 0) -> Tensor:
        """The gradients of ``layers``, flat in layer order (empty when there are none), at the
        front of the device buffer ``name`` (RS's, or ICS's: in flight beside the next step's
        RS), ``extra`` elements left after them."""
        assert self._buffers is not None, "attach() first"
        size = sum(grads[i].numel() for i in layers)
        out = self._buffers.get(name, size + extra, self._params[0].dtype)[:size]
        if layers:
            torch.cat([grads[i].reshape(-1) for i in layers], out=out)
        return out

    def flush(self) -> None:
        self._correct(still_unimportant=None)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None
