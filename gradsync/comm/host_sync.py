"""Host synchronizations that a method needs, declared by name and counted.

On a GPU, reading a device value on the host (``.item()``, ``.tolist()``, ``float(t)``, a
result whose size depends on the data such as ``nonzero`` or ``unique``) waits for every kernel
queued before it: the host stops feeding the device. gradsync allows such a wait only where a
method decides something on the host (which indices to send, which bins to pack, how long a
payload is), and each such place runs inside ``host_sync(point)``:

* the point is counted (``take_counts``), so a test can check that a step reaches only the
  points its scheduler and compressor declare (``Capabilities.host_syncs``, a compressor's
  ``host_syncs``);
* under ``torch.cuda.set_sync_debug_mode("error")`` (the ``gpu`` test that runs every
  scheduler with it) the declared point is let through while any other sync raises.

The debug mode is one setting for the whole process, and the communication thread passes
declared points while the training thread works, before, during and after a checked step. So
the mode is never saved and restored per point: the check says which mode it wants
(``check_syncs``), and the mode is off while any thread is inside a declared point and the
wanted one otherwise. While one thread is inside, another thread's sync goes unnoticed: the
check can miss a sync, never invent one.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import torch

_lock = threading.Lock()
_counts: Counter[str] = Counter()
ERROR = 2
"""torch.cuda's sync debug mode that raises at a synchronizing call."""
_wanted = 0
"""The sync debug mode asked for outside declared points (0: off; 2: "error")."""
_inside = 0
"""Declared points open now, in every thread."""


@contextmanager
def host_sync(point: str) -> Iterator[None]:
    """Run the block as the declared host synchronization ``point`` (see the module's text)."""
    global _inside
    with _lock:
        _counts[point] += 1
        _inside += 1
        if _inside == 1 and _wanted:
            torch.cuda.set_sync_debug_mode(0)
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0 and _wanted:
                torch.cuda.set_sync_debug_mode(_wanted)


def check_syncs(on: bool) -> None:
    """Make every host synchronization outside a declared point raise (``on``), or let them
    all pass again; for a CUDA process (``HostSyncCheck``)."""
    global _wanted
    with _lock:
        _wanted = ERROR if on else 0
        if _inside == 0:
            torch.cuda.set_sync_debug_mode(_wanted)


def inside_declared() -> bool:
    """True while some thread is inside a declared point (an operation counter's test of
    whether the synchronization it sees was declared)."""
    with _lock:
        return _inside > 0


def take_counts() -> dict[str, int]:
    """How often each point was passed since the last call; the counts start again from zero."""
    global _counts
    with _lock:
        counts, _counts = _counts, Counter()
    return dict(counts)
