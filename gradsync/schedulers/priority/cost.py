"""``bytescheduler`` and ``usbyte`` for ``gradsync simulate``: the discrete-event simulator on
partitions, each priced by the compressor's measured wire format on the cluster (US-Byte plans
its partitions from buckets of DeFT's default size, its profiling unit here)."""

from __future__ import annotations

import functools

from gradsync.projection.predict import (
    SIMULATED_ITERATIONS,
    Estimate,
    Job,
    bucket_times,
    partitioned,
    simulated,
    start_up,
)


def bytescheduler(job: Job) -> Estimate:
    from gradsync.algorithms.simulator import bytescheduler

    times = bucket_times(job, partitioned(job, int(job.scheduler.partition_size)))
    schedule = functools.partial(
        bytescheduler, partitions=1, iterations=SIMULATED_ITERATIONS, alpha=start_up(job)
    )
    prediction = simulated(job, schedule, times)
    return Estimate(prediction.iteration + job.profile.update, simulated=prediction)


def usbyte(job: Job) -> Estimate:
    from gradsync.algorithms.simulator import usbyte
    from gradsync.schedulers.deft.config import PARTITION_SIZE

    times = bucket_times(job, partitioned(job, PARTITION_SIZE))
    schedule = functools.partial(usbyte, iterations=SIMULATED_ITERATIONS, alpha=start_up(job))
    prediction = simulated(job, schedule, times)
    return Estimate(prediction.iteration + job.profile.update, simulated=prediction)
