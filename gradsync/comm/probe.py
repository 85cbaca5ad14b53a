"""A quick all-reduce at start-up that shows the bandwidth workers actually get between them."""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

PROBE_SECONDS = 0.1  # aim for this long per all-reduce at the announced rate
MIN_BYTES, MAX_BYTES = 64 << 10, 8 << 20


def probe_bytes(link_mbit: float) -> int:
    """A message size that takes about PROBE_SECONDS at ``link_mbit``."""
    target = int(link_mbit * 1e6 / 8 * PROBE_SECONDS)
    return max(MIN_BYTES, min(MAX_BYTES, target)) // 4 * 4


def allreduce_mbit(*, nbytes: int, device: torch.device, repeats: int = 3) -> float:
    """Bus bandwidth of a float32 all-reduce of ``nbytes`` in Mbit/s: 2(n-1)/n·bytes·8 per
    second (what each worker's link carries under a ring), median of ``repeats`` after a
    warm-up. Not counted in any method's bytes."""
    n = dist.get_world_size()
    buf = torch.zeros(nbytes // 4, dtype=torch.float32, device=device)
    dist.all_reduce(buf)  # warm-up: connections, buffers
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(buf)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return 2 * (n - 1) / n * nbytes * 8 / statistics.median(times) / 1e6
