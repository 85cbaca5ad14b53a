"""A compressed gradient pushed to a parameter server, point to point over a ``Collective``: a
length, then the compressor's context and the payload's layout (pickled: shapes, dtypes,
quantization scales), then the payload's tensors. The server decompresses with the worker's own
context, so any compressor whose ``decompress`` needs nothing but its payload and context can
push. The collective counts the bytes (all three parts are this worker's traffic). Every part
travels from host memory (``host.py``): a worker on a GPU sends host copies."""

from __future__ import annotations

import pickle
from typing import Any

import torch
from torch import Tensor

from gradsync.cluster.group_devices import HOST
from gradsync.schedulers.ps.host import host_empty, pickled, to_host
from gradsync.schedulers.ps.layout import PUSH
from gradsync.types import Collective, Payload

_BLOB, _TENSORS = PUSH + 10, PUSH + 20  # tags of a push's second and later parts


def send_payload(link: Collective, payload: Payload, ctx: Any, *, dst: int) -> None:
    """Push ``payload`` and ``ctx`` to rank ``dst`` of ``link`` (on the communication thread:
    from a GPU, the copies to the host wait for its stream)."""
    tensors = tuple(to_host(t) for t in payload)
    layout = [(t.dtype, tuple(t.shape)) for t in tensors]
    blob = torch.frombuffer(bytearray(pickled((ctx, layout))), dtype=torch.uint8)
    length = torch.tensor([blob.numel()], dtype=torch.int64, device=HOST)
    # One part after the other, as the server takes them: never two sends in flight at once.
    link.send((length,), dst=dst, tag=PUSH)
    link.send((blob,), dst=dst, tag=_BLOB)
    link.send(tensors, dst=dst, tag=_TENSORS)


def recv_payload(link: Collective, src: int | None = None) -> tuple[int, Payload, Any]:
    """(sender, payload, ctx) of the next push, from ``src`` or from whichever worker pushes."""
    length = host_empty(1, torch.int64)
    sender = link.recv((length,), src=src, tag=PUSH)
    blob = host_empty(int(length.item()), torch.uint8)
    link.recv((blob,), src=sender, tag=_BLOB)
    ctx, layout = pickle.loads(blob.numpy().tobytes())
    tensors: tuple[Tensor, ...] = tuple(host_empty(shape, dtype) for dtype, shape in layout)
    link.recv(tensors, src=sender, tag=_TENSORS)
    return sender, tensors, ctx
