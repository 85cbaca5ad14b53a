"""Which GPU a worker takes, and how many workers share one on its node.

Asked where the workers start, per node: by the worker itself (every launcher), and before
anything starts by the config checks of runners whose workers start on the launching host
(``runner=local``, ``netem``, ``torchrun``). A job submitted to a cluster's queue is never
checked on the submitting host, which may have no GPU at all (a login node).

Nothing here imports torch: callers pass the number of devices they see.
"""

from __future__ import annotations

from collections.abc import Mapping


def gpus_on_node(environ: Mapping[str, str], visible: int, *, slurm_task: bool) -> int:
    """GPUs this job holds on this node for its workers. For a worker that Slurm started as
    one of the job's tasks (``slurm_task``), Slurm says so in ``SLURM_GPUS_ON_NODE``: a site
    that binds one GPU to each task shows every task only its own device. Processes started
    on this host by one launcher (gradsync's local runner, torchrun; also inside a Slurm
    allocation) share the devices this process sees."""
    granted = environ.get("SLURM_GPUS_ON_NODE", "")
    return int(granted) if slurm_task and granted.isdigit() else visible


def workers_on_node(*, rank: int, local_rank: int, local_world_size: int, workers: int) -> int:
    """Workers (ranks below ``workers``; higher ranks are parameter servers, which take no GPU)
    among the ranks of this node. Launchers place a node's ranks in one block (torchrun's
    nodes, srun's default block distribution), starting at ``rank - local_rank``."""
    first = rank - local_rank
    return max(0, min(workers, first + local_world_size) - first)


def missing_gpu(*, gpus: int, workers_here: int, where: str) -> str | None:
    """Why the ``workers_here`` workers of ``where`` have no GPU to run on (one line), or None.
    More workers than GPUs is no shortage: they share them (``workers_per_gpu``)."""
    if workers_here == 0 or gpus > 0:
        return None
    return (
        f"trainer.device=cuda but {where} has no usable CUDA device; use trainer.device=cpu, "
        "or run on GPU nodes"
    )


def workers_per_gpu(*, gpus: int, workers_here: int) -> int:
    """The most workers one GPU of the node holds when its workers are placed round robin over
    its ``gpus`` (``local_device``)."""
    return -(-workers_here // max(gpus, 1))


def sharing_line(*, gpus: int, workers_here: int, where: str, backend: str) -> str:
    """What a job whose workers share GPUs says once when it starts."""
    most = workers_per_gpu(gpus=gpus, workers_here=workers_here)
    return (
        f"{where}: {workers_here} workers share {gpus} GPU(s), placed round robin (up to "
        f"{most} on one GPU); the workers' collectives go over {backend}"
    )


def local_device(local_rank: int, visible: int) -> int:
    """The CUDA device index of the worker with ``local_rank`` among ``visible`` devices: round
    robin over a node's GPUs that every task sees (several workers per GPU when the node has
    more workers than GPUs), 0 where each task sees only its own."""
    if visible < 1:
        raise ValueError("no visible CUDA device")
    return local_rank % visible
