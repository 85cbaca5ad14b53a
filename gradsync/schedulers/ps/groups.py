"""The process groups a job with parameter servers needs besides the default one, made at the
same point on every rank (new_group is collective): the workers' own group (metrics,
evaluation, checkpoints) and a background group for traffic that runs beside the step's own
(OSP's in-computation synchronization, which is in flight while the next step's own traffic goes
on the default group).

The workers' group may use another backend than the default group (NCCL among GPU workers,
while the default group, which the servers share, is gloo: ``gradsync/cluster/backends.py``); the
background group always has the default group's backend, since it carries server traffic."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from gradsync.comm.collective import TorchCollective
from gradsync.comm.membership import member_group

_background: dist.ProcessGroup | None = None


def make_groups(
    workers: int,
    timeout: timedelta,
    *,
    backend: str | None = None,
    device_id: torch.device | None = None,
) -> dist.ProcessGroup | None:
    """The workers' group (None when the world holds only workers, and on a server); every
    rank calls this. ``backend``: the workers' group's (None: the default group's);
    ``device_id``: the GPU it is bound to on this rank (None on a server and for gloo)."""
    global _background
    if dist.get_world_size() == workers:
        return None
    group = dist.new_group(
        ranks=list(range(workers)), timeout=timeout, backend=backend, device_id=device_id
    )
    _background = member_group(dist.new_group(timeout=timeout, backend=dist.get_backend()))
    return group if isinstance(group, dist.ProcessGroup) else None  # a server is not in it


def background() -> TorchCollective:
    """Every rank over the background group (ranks as in the default group), point to point."""
    if _background is None:
        raise RuntimeError("no parameter servers in this job: make_groups() made no group")
    return TorchCollective(group=_background)
