"""What every rank of a job must agree on before its process groups exist, agreed through the
rendezvous store that torch.distributed makes for them anyway.

Whether any node has more workers than GPUs decides the backend of every group (NCCL refuses
two ranks on one GPU), and each node knows only its own count: a job whose nodes differ
would otherwise make groups of two backends and hang.
"""

from __future__ import annotations

import torch.distributed as dist


def any_rank(store: dist.Store, flag: bool, *, world_size: int, key: str) -> bool:
    """True on every rank when any of the ``world_size`` ranks passes True. A few store
    operations per rank, whatever the job's size: each adds its flag, then its arrival; the
    last to arrive says that all have, every rank waits for that word and reads the flags'
    sum."""
    store.add(f"{key}/true", int(flag))
    if store.add(f"{key}/arrived", 1) == world_size:
        store.set(f"{key}/all", "1")
    store.wait([f"{key}/all"])
    return store.add(f"{key}/true", 0) > 0
