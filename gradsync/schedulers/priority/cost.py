"""``bytescheduler`` and ``usbyte`` for ``gradsync simulate``: the discrete-event simulator on
partitions, each priced by the compressor's measured wire format on the cluster (US-Byte plans
its partitions from the equal ones of ``scheduler.max_partition_size`` elements it profiles,
as its engine does)."""

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

    schedule = functools.partial(
        simulator.usbyte, iterations=predict.SIMULATED_ITERATIONS, alpha=predict.start_up(job)
    )
    profiled = predict.partitioned(job, int(job.scheduler.max_partition_size))
    times = predict.bucket_times(job, profiled)
    return predict.simulated_estimate(job, schedule, times)
