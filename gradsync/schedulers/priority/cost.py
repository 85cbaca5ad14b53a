"""``bytescheduler`` and ``usbyte`` for ``gradsync simulate``: the discrete-event simulator on
partitions, each priced by the compressor's measured wire format on the cluster (US-Byte plans
its partitions from the equal ones of ``scheduler.max_partition_size`` elements it profiles,
as its engine does)."""

from __future__ import annotations

import functools

from gradsync.algorithms import simulator
from gradsync.projection import predict
from gradsync.projection.estimates import Estimate, Job
from gradsync.schedulers.bucket_costs import bucket_times, partitioned


def bytescheduler(job: Job) -> Estimate:

    partitions = partitioned(job, job.scheduler.partition_size)
    schedule = functools.partial(
        simulator.bytescheduler,
        partitions=1,
        iterations=predict.SIMULATED_ITERATIONS,
        alpha=predict.start_up(job),
    )
    return predict.simulated_estimate(job, schedule, bucket_times(job, partitions))


def usbyte(job: Job) -> Estimate:

    schedule = functools.partial(
        simulator.usbyte, iterations=predict.SIMULATED_ITERATIONS, alpha=predict.start_up(job)
    )
    profiled = partitioned(job, job.scheduler.max_partition_size)
    times = bucket_times(job, profiled)
    return predict.simulated_estimate(job, schedule, times)
