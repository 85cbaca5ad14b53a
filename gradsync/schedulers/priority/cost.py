"""``bytescheduler`` and ``usbyte`` for ``gradsync simulate``: the discrete-event simulator on
partitions, each priced by the compressor's measured wire format on the cluster (US-Byte plans
its partitions from buckets of DeFT's default size, its profiling unit here)."""

from __future__ import annotations

import functools

from gradsync.projection import predict
from gradsync.projection.predict import Estimate, Job


def bytescheduler(job: Job) -> Estimate:
    from gradsync.algorithms import simulator

    partitions = predict.partitioned(job, int(job.scheduler.partition_size))
    schedule = functools.partial(
        simulator.bytescheduler,
        partitions=1,
        iterations=predict.SIMULATED_ITERATIONS,
        alpha=predict.start_up(job),
    )
    return predict.simulated_estimate(job, schedule, predict.bucket_times(job, partitions))


def usbyte(job: Job) -> Estimate:
    from gradsync.algorithms import simulator
    from gradsync.schedulers.deft.config import PARTITION_SIZE

    schedule = functools.partial(
        simulator.usbyte, iterations=predict.SIMULATED_ITERATIONS, alpha=predict.start_up(job)
    )
    times = predict.bucket_times(job, predict.partitioned(job, PARTITION_SIZE))
    return predict.simulated_estimate(job, schedule, times)
