"""Which torch.distributed backend each process group of a job uses, decided once here.

The workers' collectives (``trainer.backend``):
* ``auto``: NCCL when every worker has a GPU of its own; gloo on the CPU, when workers share a
  GPU (NCCL refuses two ranks on one device) and when the runner shapes the links
  (``runner=netem``: NCCL would go around the shaped interfaces, over shared memory or its own
  sockets).
* ``nccl`` where it can work, ``gloo`` anywhere. gloo takes GPU tensors for the collectives the
  exchange engine uses (all-reduce, all-gather, broadcast), copying them through pinned host
  memory on streams of its own; point-to-point it reads and writes its buffers as host memory,
  so ``TorchCollective`` stages GPU tensors through pinned host buffers itself.

The default group holds parameter servers too, when the job runs them. Servers keep their model
on the host and take any-source receives, which only gloo offers, so a job with servers has a
gloo default group (and background group) carrying host tensors, whatever the workers use among
themselves for metrics, evaluation, checkpoints and compressors that talk.

Whether a job runs servers is its scheduler's registry entry (``parameter_server``); whether the
runner shapes links is its schema's ``shapes_links``; whether workers share a GPU is known where
they start, and agreed by every rank before the groups exist (``gradsync/cluster/agreement.py``,
``gradsync.train.worker.init_process_group``). Where a group's tensors live is
``group_devices.py``'s. Nothing here imports torch: the command line decides before any worker
starts, without paying for it.
"""

from __future__ import annotations

from dataclasses import dataclass

GLOO, NCCL, AUTO = "gloo", "nccl", "auto"


class BackendRefused(ValueError):
    """``trainer.backend=nccl`` where NCCL cannot work (the one-line reason)."""


@dataclass(frozen=True)
class Backends:
    world: str
    """The default group: every rank of the job, parameter servers included."""
    workers: str
    """The workers' own group (the default group itself when the job has no servers)."""


def nccl_problem(*, device: str, shares_gpus: bool, shaped_links: bool) -> str | None:
    """Why NCCL cannot carry this job's collectives (one line that says what to set), or None."""
    if device != "cuda":
        return (
            f"trainer.backend=nccl needs GPUs, and trainer.device={device}: use "
            "trainer.backend=gloo (or auto), or trainer.device=cuda"
        )
    if shares_gpus:
        return (
            "trainer.backend=nccl cannot run two workers on one GPU (NCCL refuses duplicate "
            "GPUs): use trainer.backend=gloo (or auto), or give every worker a GPU"
        )
    if shaped_links:
        return (
            "trainer.backend=nccl would bypass the links the runner shapes (NCCL talks over "
            "shared memory and its own sockets): use trainer.backend=gloo (or auto)"
        )
    return None


def choose_backends(
    *,
    device: str,
    parameter_server: bool,
    requested: str = AUTO,
    shares_gpus: bool = False,
    shaped_links: bool = False,
) -> Backends:
    """The backends of a job on ``device`` (``trainer.device``) asking for ``requested``
    (``trainer.backend``); ``BackendRefused`` where NCCL is asked for and cannot work."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"no process-group backend for trainer.device={device}; use cpu or cuda")
    if requested not in (AUTO, NCCL, GLOO):
        raise ValueError(f"unknown trainer.backend={requested}; use auto, nccl or gloo")
    problem = nccl_problem(device=device, shares_gpus=shares_gpus, shaped_links=shaped_links)
    if requested == NCCL and problem is not None:
        raise BackendRefused(problem)
    workers = requested if requested != AUTO else (NCCL if problem is None else GLOO)
    return Backends(world=GLOO if parameter_server else workers, workers=workers)
