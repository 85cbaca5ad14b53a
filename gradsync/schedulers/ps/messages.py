"""A compressed gradient pushed to a parameter server, point to point: a length, then the
compressor's context and the payload's layout (pickled: shapes, dtypes, quantization scales),
then the payload's tensors. The server decompresses with the worker's own context, so any
compressor whose ``decompress`` needs nothing but its payload and context can push."""

from __future__ import annotations

import pickle
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from gradsync.comm.membership import wait_all
from gradsync.schedulers.ps.layout import PUSH
from gradsync.types import Payload

_BLOB, _TENSORS = PUSH + 10, PUSH + 20  # tags of a push's second and later parts


def send_payload(payload: Payload, ctx: Any, *, dst: int) -> int:
    """Push ``payload`` and ``ctx`` to rank ``dst``; the bytes sent."""
    tensors = [t.detach().contiguous() for t in payload]
    layout = [(t.dtype, tuple(t.shape)) for t in tensors]
    blob = torch.frombuffer(bytearray(pickle.dumps((ctx, layout))), dtype=torch.uint8)
    length = torch.tensor([blob.numel()], dtype=torch.int64)
    works = [
        dist.isend(length, dst=dst, tag=PUSH),
        dist.isend(blob, dst=dst, tag=_BLOB),
        *(dist.isend(t, dst=dst, tag=_TENSORS + i) for i, t in enumerate(tensors)),
    ]
    wait_all(works)
    return 8 + blob.numel() + sum(t.numel() * t.element_size() for t in tensors)


def recv_payload(src: int | None = None) -> tuple[int, Payload, Any]:
    """(sender, payload, ctx) of the next push, from ``src`` or from whichever worker pushes."""
    length = torch.empty(1, dtype=torch.int64)
    sender = dist.recv(length, src=src, tag=PUSH)
    blob = torch.empty(int(length.item()), dtype=torch.uint8)
    dist.recv(blob, src=sender, tag=_BLOB)
    ctx, layout = pickle.loads(blob.numpy().tobytes())
    tensors: list[Tensor] = []
    for i, (dtype, shape) in enumerate(layout):
        tensor = torch.empty(shape, dtype=dtype)
        dist.recv(tensor, src=sender, tag=_TENSORS + i)
        tensors.append(tensor)
    return sender, tuple(tensors), ctx
