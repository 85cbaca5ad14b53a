"""A compressed gradient pushed to a parameter server, point to point over a ``Collective``: a
length, then the compressor's context and the payload's layout (pickled: shapes, dtypes,
quantization scales), then the payload's tensors. The server decompresses with the worker's own
context, so any compressor whose ``decompress`` needs nothing but its payload and context can
push. The collective counts the bytes (all three parts are this worker's traffic). Every part
travels from host memory: a worker on a GPU stages its payload there (``host.Staging``), and a
server receives into buffers it keeps from one push to the next (``buffers.Buffers``)."""

from __future__ import annotations

import pickle
from typing import Any

import torch
from torch import Tensor

from gradsync.cluster.group_devices import HOST
from gradsync.schedulers.ps.buffers import Buffers
from gradsync.schedulers.ps.host import pickled
from gradsync.schedulers.ps.layout import PUSH
from gradsync.types import Collective, Payload

_BLOB, _TENSORS = PUSH + 10, PUSH + 20  # tags of a push's second and later parts


def send_payload(link: Collective, payload: Payload, ctx: Any, *, dst: int) -> None:
    """Push ``payload`` (in host memory, contiguous) and ``ctx`` to rank ``dst`` of ``link``."""
    layout = [(t.dtype, tuple(t.shape)) for t in payload]
    blob = torch.frombuffer(bytearray(pickled((ctx, layout))), dtype=torch.uint8)
    length = torch.tensor([blob.numel()], dtype=torch.int64, device=HOST)
    # One part after the other, as the server takes them: never two sends in flight at once.
    link.send((length,), dst=dst, tag=PUSH)
    link.send((blob,), dst=dst, tag=_BLOB)
    link.send(payload, dst=dst, tag=_TENSORS)


def recv_payload(
    link: Collective, buffers: Buffers, src: int | None = None
) -> tuple[int, Payload, Any]:
    """(sender, payload, ctx) of the next push, from ``src`` or from whichever worker pushes;
    the payload's tensors are views of ``buffers``, valid until the next push is received."""
    length = buffers.get("length", 1, torch.int64)
    sender = link.recv((length,), src=src, tag=PUSH)
    blob = buffers.get("blob", int(length.item()), torch.uint8)
    link.recv((blob,), src=sender, tag=_BLOB)
    ctx, layout = pickle.loads(blob.numpy().tobytes())
    tensors: tuple[Tensor, ...] = tuple(
        buffers.get(("tensor", i), shape, dtype) for i, (dtype, shape) in enumerate(layout)
    )
    link.recv(tensors, src=sender, tag=_TENSORS)
    return sender, tensors, ctx
