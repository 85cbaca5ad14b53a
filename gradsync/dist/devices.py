"""Which GPU a worker takes, and whether its node has one for every worker placed there.

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


def gpu_shortage(*, gpus: int, workers_here: int, where: str) -> str | None:
    """Why ``workers_here`` workers cannot each have a GPU of ``where`` (one line), or None."""
    if workers_here == 0:
        return None
    if gpus == 0:
        return (
            f"trainer.device=cuda but {where} has no usable CUDA device; use trainer.device=cpu, "
            "or run on GPU nodes"
        )
    if workers_here > gpus:
        return (
            f"{where} has {gpus} GPU(s) for {workers_here} workers (one GPU each); lower "
            "trainer.workers, or spread them over more nodes (runner.nodes, torchrun --nnodes)"
        )
    return None


def local_device(local_rank: int, visible: int) -> int:
    """The CUDA device index of the worker with ``local_rank`` among ``visible`` devices: its
    local rank on a node whose GPUs every task sees, 0 where each task sees only its own."""
    if visible < 1:
        raise ValueError("no visible CUDA device")
    return local_rank % visible
