"""Host values onto the device without making the host wait.

A plain ``torch.tensor(values, device="cuda")`` copies from pageable memory, which synchronizes
the host with the device's queue. Staged through pinned memory the copy is queued like a kernel
and the host goes on (the pinned buffer is kept alive until the copy has run).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

HostValues = Sequence[int] | Sequence[float] | Sequence[Sequence[int]] | Tensor
"""Numbers on the host: a list (of lists, for a table), or a CPU tensor."""


def on_device(values: HostValues, dtype: torch.dtype, device: torch.device) -> Tensor:
    """``values`` as a ``dtype`` tensor on ``device``."""
    host = torch.as_tensor(values, dtype=dtype)
    if device.type == "cpu":
        return host
    return host.pin_memory().to(device, non_blocking=True)
