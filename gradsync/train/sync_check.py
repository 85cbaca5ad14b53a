"""``trainer.check_host_syncs_from``: steps that may wait on the device only where their method
says so.

From the given step on, each training step (loading its batch included) runs under the check.
On a GPU, torch.cuda's sync debug mode is set to "error", so any host synchronization raises,
except inside the points the scheduler and compressor declare (``gradsync/comm/host_sync.py``
lets those through); not under gloo, whose own threads wait for the GPU tensors they copy.
On every device, the declared points the step passed are compared with what the job's
scheduler and compressor declare: a point nobody declared fails the job, naming it. Logging,
evaluation and checkpoints, which read values on the host by design, run outside.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import torch
from omegaconf import DictConfig

from gradsync.comm.host_sync import check_syncs, take_counts
from gradsync.config.instantiate import resolve
from gradsync.config.schema import Precision
from gradsync.schedulers.registry import specs_like
from gradsync.train.precision import precision_host_syncs


class UndeclaredHostSync(RuntimeError):
    """A step passed a host synchronization point that its scheduler and compressor do not
    declare."""


class HostSyncCheck:
    def __init__(
        self,
        *,
        declared: Mapping[str, str],
        device: torch.device,
        from_step: int | None,
        backend_waits: bool = False,
    ) -> None:
        self.declared = dict(declared)
        """Point name -> why the method needs it."""
        # Sync debug mode is process-wide: a backend that waits for the device on threads of
        # its own (gloo with GPU tensors) would fail there. Only the declared points are then
        # checked.
        self.cuda = device.type == "cuda" and not backend_waits
        self.from_step = from_step
        self.passed: dict[str, int] = {}
        """How often each point was passed in the checked steps."""

    @contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Run one training step under the check (a no-op before ``from_step``)."""
        if self.from_step is None or step < self.from_step:
            yield
            return
        take_counts()  # what earlier steps, and the work between steps, passed
        if self.cuda:
            check_syncs(True)
        try:
            yield
        finally:
            if self.cuda:
                check_syncs(False)
        self._check(take_counts(), step)

    def _check(self, counts: Mapping[str, int], step: int) -> None:
        for point, count in counts.items():
            self.passed[point] = self.passed.get(point, 0) + count
        undeclared = sorted(set(counts) - set(self.declared))
        if undeclared:
            raise UndeclaredHostSync(
                f"step {step} waited on the host at {', '.join(undeclared)}, which neither the "
                f"scheduler nor the compressor declares (declared: "
                f"{', '.join(sorted(self.declared)) or 'none'})"
            )


def declared_host_syncs(cfg: DictConfig) -> dict[str, str]:
    """The points where the job's scheduler, compressor and precision say a step may wait on
    the host (point -> why): the scheduler's registry entry, the compressor's ``host_syncs``
    and fp16's loss scale."""
    compressor = resolve(cfg.compressor._target_, path="compressor._target_")
    points = dict(getattr(compressor, "host_syncs", {}))
    for spec in specs_like(cfg.scheduler):
        points.update(spec.capabilities.host_syncs)
    points.update(precision_host_syncs(Precision(cfg.trainer.precision)))
    return points
