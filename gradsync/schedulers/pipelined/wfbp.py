"""``scheduler=wfbp``: wait-free backpropagation with tensor fusion, as PyTorch DDP does it.
Gradients are gathered into buckets in backward order (the first of ``first_bucket_mb`` MiB,
the others of ``bucket_mb``), and each
bucket is all-reduced as soon as its last gradient is ready. Only ``step()`` waits. For
compressors whose payloads add up."""

from __future__ import annotations

from collections.abc import Sequence

from typing_extensions import Unpack

from gradsync.algorithms.merge_plans import Plan, threshold_groups
from gradsync.schedulers.engine.engine import EngineParts
from gradsync.schedulers.pipelined.config import BUCKET_MB, FIRST_BUCKET_MB
from gradsync.schedulers.pipelined.pipelined import Measurements, PipelinedSync
from gradsync.schedulers.summing import require_allreducible

MIB = 1 << 20


class BucketPlanner:
    """DDP's buckets: the first closes at ``first_bucket_mb`` so that communication starts
    early in backward, the others at ``bucket_mb``."""

    profile_steps = 0

    def __init__(self, bucket_mb: float, first_bucket_mb: float) -> None:
        self.bucket_mb = bucket_mb
        self.first_bucket_mb = first_bucket_mb

    def plan(self, job: Measurements) -> tuple[Plan, dict[str, float]]:
        return self.groups(job.sizes, job.element_size), {}

    def groups(self, sizes: Sequence[int], element_size: int) -> Plan:
        """Tensors (in backward order) per bucket."""
        first = threshold_groups(sizes, _elements(self.first_bucket_mb, element_size))
        rest = sizes[first[0] :]
        later = threshold_groups(rest, _elements(self.bucket_mb, element_size)) if rest else ()
        return (first[0], *later)


def _elements(megabytes: float, element_size: int) -> int:
    return max(1, int(megabytes * MIB / element_size))


class WfbpSync(PipelinedSync):
    def __init__(
        self,
        *,
        bucket_mb: float = BUCKET_MB,
        first_bucket_mb: float = FIRST_BUCKET_MB,
        **parts: Unpack[EngineParts],
    ) -> None:
        require_allreducible("wfbp", "buckets", parts["compressor"])
        super().__init__(planner=BucketPlanner(bucket_mb, first_bucket_mb), **parts)
