"""What the cost models of the bucketed schedules (pipelined, priority, DeFT) share: a job's
buckets, and their times as the discrete-event simulator takes them."""

from __future__ import annotations

from gradsync.algorithms.simulator import BucketTimes
from gradsync.projection.estimates import Job
from gradsync.schedulers.engine.buckets import Buckets


def partitioned(job: Job, elements: float) -> Buckets:
    """The job's gradient cut into buckets of ``elements`` (tensors are cut)."""
    return Buckets.partition(job.profile.sizes, max(1, int(elements)))


def bucket_times(job: Job, buckets: Buckets) -> BucketTimes:
    p = job.profile
    comm = [
        job.wire.exchange_seconds(job.cluster, buckets.numel(b)) if job.cluster.workers > 1 else 0
        for b in range(len(buckets))
    ]
    return BucketTimes(
        forward=tuple(buckets.spread(p.forward, p.sizes)),
        backward=tuple(buckets.spread(p.backward, p.sizes)),
        comm=tuple(comm),
    )
