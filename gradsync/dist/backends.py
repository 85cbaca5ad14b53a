"""Which torch.distributed backend each process group of a job uses, decided once here.

* On the CPU every group is gloo.
* On GPUs without parameter servers every rank is a GPU worker: NCCL throughout.
* On GPUs with parameter servers the default group holds the servers too. Servers keep their
  model on the host and take any-source receives, which only gloo offers, so the default group
  (and the background group made beside it) is gloo and carries host tensors; the workers' own
  group (metrics, evaluation, checkpoints, compressors that talk) is NCCL among their GPUs.

Whether a job runs servers is its scheduler's registry entry (``parameter_server``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch
from omegaconf import DictConfig

from gradsync.schedulers.registry import runs_servers

GLOO, NCCL = "gloo", "nccl"
HOST = torch.device("cpu")


@dataclass(frozen=True)
class Backends:
    world: str
    """The default group: every rank of the job, parameter servers included."""
    workers: str
    """The workers' own group (the default group itself when the job has no servers)."""


def choose_backends(*, device: str, parameter_server: bool) -> Backends:
    """The backends of a job on ``device`` (``trainer.device``), with or without servers."""
    if device == "cpu":
        return Backends(world=GLOO, workers=GLOO)
    if device == "cuda":
        return Backends(world=GLOO if parameter_server else NCCL, workers=NCCL)
    raise ValueError(f"no process-group backend for trainer.device={device}; use cpu or cuda")


def job_backends(cfg: DictConfig) -> Backends:
    """The same answer on every rank: servers included, whatever device they compute on."""
    device = cfg.trainer.device  # a Device in a typed config, its name once read from YAML
    return choose_backends(
        device=device.value if isinstance(device, Enum) else str(device),
        parameter_server=runs_servers(cfg.scheduler),
    )


def bound_device(backend: str, device: torch.device) -> torch.device | None:
    """``device_id`` for a group of ``backend`` on this rank: its GPU for NCCL (created eagerly,
    bound to it), None for gloo and for a rank on the host (a server outside the NCCL group)."""
    return device if backend == NCCL and device.type == "cuda" else None


def tensors_on(backend: str, device: torch.device) -> torch.device:
    """Where the tensors of a group of ``backend`` must be: the GPU for NCCL, the host for
    gloo (which sends from host memory)."""
    return device if backend == NCCL else HOST
