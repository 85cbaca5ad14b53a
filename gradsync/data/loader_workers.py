"""How many loader processes read a disk dataset for each worker (``trainer.loader_workers``).

``auto`` gives each worker its share of the cores this process may run on, less its compute
threads (at most ``AUTO_MAX``): under Slurm the task's ``SLURM_CPUS_PER_TASK``, elsewhere
``os.sched_getaffinity`` shared by the node's processes. Datasets held in memory take no
loader processes whatever the setting (``feeds.py``). A Slurm job under ``auto`` asks for
``SLURM_AUTO`` cores per task for loading a disk dataset, none for one held in memory.

Torch-free: the command line reads it before any worker starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from gradsync.config.schema import LOADERS_AUTO

AUTO = LOADERS_AUTO
AUTO_MAX = 16
"""Past this many processes per worker, more decoders mostly cost memory and start-up."""
SLURM_AUTO = 8
"""Cores per Slurm task for loader processes under auto: about what a GPU's ImageNet
decoding needs, and what GPU nodes have per GPU."""


def slurm_loader_cores(setting: str, *, streamed: bool) -> int:
    """Cores a Slurm task asks for loading, besides its compute threads."""
    if setting != AUTO:
        return int(setting)
    return SLURM_AUTO if streamed else 0


def worker_cpus(environ: Mapping[str, str], *, slurm_task: bool, processes_here: int) -> int:
    """Cores this worker may count as its own: what Slurm gave its task, or this process's
    affinity shared by the ``processes_here`` processes of the job on this node."""
    granted = environ.get("SLURM_CPUS_PER_TASK", "")
    if slurm_task and granted.isdigit():
        return int(granted)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cpus or 1) // max(1, processes_here))


def loader_workers(setting: str, *, cpus: int, threads: int) -> int:
    """The loader processes of a worker that has ``cpus`` cores and ``threads`` compute
    threads."""
    if setting != AUTO:
        return int(setting)
    return max(0, min(AUTO_MAX, cpus - threads))
