"""Where the tensors of a process group live, and the GPU it is bound to, by its backend
(``backends.py`` chooses the backend)."""

from __future__ import annotations

import torch

from gradsync.cluster.backends import NCCL

HOST = torch.device("cpu")


def bound_device(backend: str, device: torch.device) -> torch.device | None:
    """``device_id`` for a group of ``backend`` on this rank: its GPU for NCCL (created eagerly,
    bound to it), None for gloo and for a rank on the host (a server outside the NCCL group)."""
    return device if backend == NCCL and device.type == "cuda" else None


def tensors_on(backend: str, device: torch.device) -> torch.device:
    """Where the tensors of a group of ``backend`` go for collectives outside the exchange
    engine (the model's first broadcast, the link probe): the GPU for NCCL, the host for gloo,
    which would stage them there anyway."""
    return device if backend == NCCL else HOST
