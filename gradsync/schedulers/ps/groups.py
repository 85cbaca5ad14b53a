"""The process groups a job with parameter servers needs besides the default one, made at the
same point on every rank (new_group is collective): the workers' own group (metrics,
evaluation, checkpoints) and a background group for traffic that runs beside the step's own
(OSP's in-computation synchronization, which is in flight while the next step's own traffic goes
on the default group)."""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

from gradsync.comm.collective import TorchCollective
from gradsync.comm.membership import member_group

_background: dist.ProcessGroup | None = None


def make_groups(workers: int, timeout: timedelta) -> dist.ProcessGroup | None:
    """The workers' group (None when the world holds only workers, and on a server); every
    rank calls this."""
    global _background
    if dist.get_world_size() == workers:
        return None
    group = dist.new_group(ranks=list(range(workers)), timeout=timeout)
    _background = member_group(dist.new_group(timeout=timeout))
    return group if isinstance(group, dist.ProcessGroup) else None  # a server is not in it


def background() -> TorchCollective:
    """Every rank over the background group (ranks as in the default group), point to point."""
    if _background is None:
        raise RuntimeError("no parameter servers in this job: make_groups() made no group")
    return TorchCollective(group=_background)
