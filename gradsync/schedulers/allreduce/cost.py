"""``scheduler=allreduce`` for ``gradsync simulate``: backward, then compress and exchange the
whole gradient (no overlap)."""

from __future__ import annotations

from gradsync.projection.estimates import Estimate, Job


def iteration(job: Job) -> Estimate:
    p = job.profile
    comm = job.wire.exchange_seconds(job.cluster, p.numel) if job.cluster.workers > 1 else 0.0
    return Estimate(p.compute + comm, groups=1)
