"""The parameter server of ``scheduler=osp`` (docs/methods/schedulers/osp.md): one server
holding the global model layer by layer, with the job's optimizer.

Iteration i, on the server:
1. RS: the important layers' gradients from every worker (behind a barrier, as BSP), with each
   worker's loss and compute time; their mean is applied to those layers.
2. The next iteration's Gradient Importance Bitmap (GIB): importance Σ|g·P| per layer from the
   global parameters and the latest global gradient of each layer, split by the byte budget of
   the epoch (``SizeSchedule`` from the previous epoch's loss, U_max from the link's bandwidth
   and the measured compute time, capped at ``max_unimportant`` of the model; or a fixed
   ``budget``). The reply carries the important layers' new parameters and the GIB.
3. ICS: the unimportant layers' gradients of iteration i, which workers send in the background
   while they compute iteration i+1; their mean is applied, and each worker gets the global
   change of those layers to swap for its local one (LGP's correction).

Taking ICS of iteration i before RS of iteration i+1 keeps every layer's updates in iteration
order, so the global model is exactly what BSP would hold where all layers are important.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import Tensor, nn

from gradsync.algorithms.osp_budget import umax_bytes
from gradsync.algorithms.osp_split import (
    SizeSchedule,
    layer_bytes,
    layer_importance,
    split_unimportant,
)
from gradsync.cluster.rates import DEFAULT_RATE, rate_mbit
from gradsync.comm.collective import TorchCollective
from gradsync.schedulers.ps.buffers import Buffers
from gradsync.schedulers.ps.config import OspConfig
from gradsync.schedulers.ps.groups import background
from gradsync.schedulers.ps.layout import PULL, PUSH, shaped
from gradsync.schedulers.ps.server import Serving
from gradsync.types import Collective

DEFAULT_LINK_MBIT = rate_mbit(DEFAULT_RATE)  # when neither the config nor a measurement says


def flat(params: Sequence[Tensor], layers: Iterable[int] | None = None) -> Tensor:
    """The values of ``layers`` (all when None) end to end; empty when there are none: with a
    budget of the whole model no layer is important, and the routine stage carries nothing."""
    chosen = params if layers is None else [params[i] for i in layers]
    if not chosen:
        return params[0].new_empty(0)
    return torch.cat([t.detach().reshape(-1) for t in chosen])


def link_bytes_per_s(options: OspConfig, measured_mbit: float | None) -> float:
    """b of U_max: ``scheduler.bandwidth`` when given, else the link's rate as measured at the
    start of the run (runner=netem probes it), else ``DEFAULT_RATE``."""
    if options.bandwidth:
        return rate_mbit(options.bandwidth) * 1e6 / 8
    return (measured_mbit or DEFAULT_LINK_MBIT) * 1e6 / 8


class _Budget:
    """Bytes of unimportant layers allowed in each iteration of an epoch."""

    def __init__(
        self, options: OspConfig, model_bytes: int, workers: int, link_mbit: float | None
    ) -> None:
        self.fixed = None if options.budget is None else options.budget * model_bytes
        self.cap = options.max_unimportant
        self.formula, self.loss_rate = options.umax_formula, options.loss_rate
        self.bandwidth = link_bytes_per_s(options, link_mbit)
        self.model_bytes, self.workers = model_bytes, workers
        self.schedule = SizeSchedule(umax=0.0)
        self.losses: list[float] = []
        self.compute: list[float] = []
        self.previous_loss: float | None = None

    def observe(self, loss: float, compute_s: float) -> None:
        self.losses.append(loss)
        self.compute.append(compute_s)

    def for_epoch(self, epoch: int) -> float:
        """Called once as each epoch starts, with the last epoch's measurements."""
        if self.fixed is not None:
            return self.fixed
        if self.compute:
            self.schedule.umax = umax_bytes(
                self.bandwidth,
                statistics.mean(self.compute),
                self.workers,
                self.model_bytes,
                loss_rate=self.loss_rate,
                formula=self.formula,
                cap=self.cap,
            )
        loss = statistics.mean(self.losses) if epoch > 0 and self.losses else None
        self.losses, self.compute = [], []
        return self.schedule.budget_for_epoch(epoch, loss)


def serve_osp(model: nn.Module, job: Serving) -> None:
    """Serve ``job.total_steps`` iterations as the one server; ``job.after_step`` sees the flat
    global model once each iteration is complete (RS and ICS); ``job.link_mbit``: the link's
    measured rate. Every message is received into, and sent from, buffers made once
    (``Buffers``), each reused only once the message it held was waited for; each layer's
    mean gradient is written into its ``latest`` in place."""
    steps_per_epoch, total_steps, after_step = job.steps_per_epoch, job.total_steps, job.after_step
    workers, options = job.workers, job.options
    assert isinstance(options, OspConfig)
    params = [p for p in model.parameters() if p.requires_grad]
    sizes = [p.numel() for p in params]
    nbytes = layer_bytes(params)
    optimizer = job.optimizer_for(model)
    latest = [torch.zeros_like(p) for p in params]  # each layer's latest global gradient
    budget = _Budget(options, sum(nbytes), workers, job.link_mbit)
    routine, ics = TorchCollective(), background()  # RS on the default group, ICS beside it
    buffers, dtype = Buffers(), params[0].dtype

    def apply(layers: list[int], received: list[Tensor], extra: int, step: int) -> None:
        """Step ``layers`` by the mean of every worker's push of them (``extra`` stamps after
        each), summed in rank order (the same sum on every run) into their ``latest``."""
        chosen = [latest[i] for i in layers]
        if chosen:
            for w, push in enumerate(received):
                pieces = shaped(push[: len(push) - extra], chosen)
                if w == 0:
                    torch._foreach_copy_(chosen, pieces)
                else:
                    torch._foreach_add_(chosen, pieces)
            torch._foreach_div_(chosen, workers)
        for p in params:
            p.grad = None
        for layer in layers:
            params[layer].grad = latest[layer]
        for group in optimizer.param_groups:
            group["lr"] = job.learning_rate(step)
        optimizer.step()

    def post(
        layers: list[int], extra: int, link: Collective, name: str
    ) -> Callable[[], list[Tensor]]:
        """Post every worker's push of ``layers`` (+ ``extra`` stamps) on ``link`` (RS or ICS,
        its ``name``); the returned function waits for them. gloo reads a message off the link
        only once its receive is posted."""
        count = sum(sizes[i] for i in layers) + extra
        received = [buffers.get(("push", name, w), count, dtype) for w in range(workers)]
        waits = [link.start_recv((r,), src=w, tag=PUSH) for w, r in enumerate(received)]
        return lambda: [wait()[0] for wait in waits]

    def send_all(message: Tensor, link: Collective) -> Callable[[], None]:
        """Start ``message`` to every worker; the returned function waits until it is sent."""
        waits = [link.start_send((message,), dst=w, tag=PULL) for w in range(workers)]

        def wait_all() -> None:
            for wait in waits:
                wait()

        return wait_all

    gib = [True] * len(params)
    epoch_budget = budget.for_epoch(0)
    pushes = post(gib_layers(gib, True), 2, routine, "rs")
    for step in range(total_steps):
        important, unimportant = gib_layers(gib, True), gib_layers(gib, False)
        received = pushes()
        for r in received:
            budget.observe(float(r[-2]), float(r[-1]))
        apply(important, received, 2, step)
        if (step + 1) % steps_per_epoch == 0:
            epoch_budget = budget.for_epoch((step + 1) // steps_per_epoch)
        following = split_unimportant(layer_importance(latest, params), nbytes, epoch_budget)
        stamps = [float(k) for k in following] + [step + 1, step + 1]  # the GIB, the clocks
        reply = gathered(params, important, buffers, "rs", extra=len(stamps))
        reply[-len(stamps) :].copy_(torch.tensor(stamps, dtype=dtype))
        sent = send_all(reply, routine)
        # Every receive is posted before a send is waited for: the link's two directions
        # then work at once (ICS pushes come in while RS replies go out, the next RS pushes
        # while ICS replies go out) instead of one after the other.
        if unimportant:
            ics_pushes = post(unimportant, 0, ics, "ics")
            sent()
            before = gathered(params, unimportant, buffers, "before")
            apply(unimportant, ics_pushes(), 0, step)
            sent = send_all(gathered(params, unimportant, buffers, "ics").sub_(before), ics)
        if step + 1 < total_steps:
            pushes = post(gib_layers(following, True), 2, routine, "rs")
        sent()
        gib = following
        if after_step is not None:
            after_step(flat(params))


def gathered(
    params: Sequence[Tensor], layers: list[int], buffers: Buffers, key: str, *, extra: int = 0
) -> Tensor:
    """The values of ``layers`` end to end in the buffer of ``key``, with ``extra`` elements
    after them left for the caller."""
    count = sum(params[i].numel() for i in layers)
    out = buffers.get(key, count + extra, params[0].dtype)
    if layers:
        torch.cat([params[i].detach().reshape(-1) for i in layers], out=out[:count])
    return out


def gib_layers(gib: Sequence[bool], important: bool) -> list[int]:
    """The layers the GIB marks important (or unimportant), in model order."""
    return [i for i, keep in enumerate(gib) if keep == important]
