"""Run a function on N real ranks (spawned processes, FileStore rendezvous in tmp_path): gloo on
the CPU, NCCL with rank r on GPU r, gloo with every rank on GPU 0 (``SHARED_GPU``), or on the
CPU over a group that keeps NCCL's contract (``NCCL_DOUBLE``, ``nccl_double.py``)."""

from __future__ import annotations

import multiprocessing as mp
import pickle
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

SHARED_GPU = "cuda-shared"
NCCL_DOUBLE = "nccl-double"


def _entry(
    fn: Callable[..., Any],
    rank: int,
    world_size: int,
    store: str,
    out: str,
    args: tuple[Any, ...],
    device: str,
) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        backend, bound, timeout = "gloo", None, None
        if device == "cuda":
            # One rank per GPU (NCCL refuses two on one); bound at init, the communicator is
            # made now rather than at the first collective.
            torch.cuda.set_device(rank)
            backend, bound = "nccl", torch.device("cuda", rank)
        elif device == SHARED_GPU:  # every rank on GPU 0, talking gloo (as gradsync places them)
            torch.cuda.set_device(0)
        elif device == NCCL_DOUBLE:
            from tests.helpers import nccl_double

            nccl_double.register()
            # A rank whose peer failed leaves its collective within a minute, not torch's 30.
            backend, timeout = nccl_double.BACKEND, timedelta(seconds=60)
        dist.init_process_group(
            backend,
            init_method=f"file://{store}",
            rank=rank,
            world_size=world_size,
            device_id=bound,
            timeout=timeout,
        )
        result: Any = ("ok", fn(rank, world_size, *args))
    except BaseException:
        result = ("error", traceback.format_exc())
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    Path(out).write_bytes(pickle.dumps(result))


def run_world(
    fn: Callable[..., Any],
    world_size: int,
    tmp_path: Path,
    *args: Any,
    timeout: float = 120,
    device: str = "cpu",
) -> list[Any]:
    """``fn(rank, world_size, *args)`` on every rank; returns the results in rank order.

    ``fn`` must be importable (module level) because ranks are spawned interpreters.
    ``device="cuda"``: the ranks talk over NCCL, rank r on GPU r (its current device);
    ``SHARED_GPU``: over gloo, every rank's current device GPU 0; ``NCCL_DOUBLE``: on the CPU,
    over a default group that keeps NCCL's contract. Results come back through
    pickles, so ``fn`` returns CPU tensors.
    """
    tmp_path.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    store = tmp_path / "store"
    outs = [tmp_path / f"result{r}.pkl" for r in range(world_size)]
    procs = [
        ctx.Process(target=_entry, args=(fn, r, world_size, str(store), str(outs[r]), args, device))
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
    late = [p for p in procs if p.is_alive()]
    for p in late:  # every one: a rank left behind would hold its peers' GPU and ports
        p.kill()
        p.join()
    if late:
        raise TimeoutError(f"{len(late)} rank(s) did not finish in {timeout:.0f} s")
    results = []
    for rank, out in enumerate(outs):
        if not out.exists():
            raise RuntimeError(f"rank {rank} died without a result")
        status, value = pickle.loads(out.read_bytes())
        if status == "error":
            raise RuntimeError(f"rank {rank} failed:\n{value}")
        results.append(value)
    return results
