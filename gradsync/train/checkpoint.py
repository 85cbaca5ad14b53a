"""Resumable checkpoints shared by all workers.

Layout: ``<run_dir>/checkpoints/step_<N>/`` holds ``common.pt`` (model, optimizer, LR schedule,
fp16's loss scale, position; written by rank 0), ``rank<r>.pt`` (that worker's synchronization
state such as error feedback residuals, and its RNG states: the CPU's, and its GPU's when it
trains on one) and ``meta.json``. ``checkpoints/latest`` names the newest
complete one; it is replaced atomically only after every rank has written its part, so a crash
while saving leaves the previous checkpoint in place.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

LATEST = "latest"


@dataclass(frozen=True)
class Position:
    epoch: int
    """Epoch to continue in."""
    batch_in_epoch: int
    """Batches of that epoch already trained."""
    step: int
    """Optimizer steps taken so far."""


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory from a checkpoint or run directory; ValueError if there is none."""
    path = Path(path).expanduser()
    if (path / "common.pt").is_file():
        return path
    pointer = path / "checkpoints" / LATEST
    if pointer.is_file():
        return path / "checkpoints" / pointer.read_text().strip()
    if not path.exists():
        raise ValueError(f"trainer.resume={path} does not exist")
    raise ValueError(
        f"trainer.resume={path} holds no checkpoint: pass a run directory with checkpoints/ "
        "or a checkpoints/step_* directory"
    )


def read_meta(checkpoint: Path) -> dict[str, Any]:
    return json.loads((checkpoint / "meta.json").read_text())


def save(
    run_dir: Path,
    *,
    rank: int,
    world_size: int,
    position: Position,
    common: dict[str, Any],
    local: dict[str, Any],
    barrier: Callable[[], None],
) -> None:
    import torch  # imported here: the launcher resolves checkpoint paths without torch

    root = run_dir / "checkpoints"
    name = f"step_{position.step:08d}"
    target = root / name
    target.mkdir(parents=True, exist_ok=True)
    torch.save(local, target / f"rank{rank}.pt")
    if rank == 0:
        torch.save({**common, "position": asdict(position)}, target / "common.pt")
        meta = {"world_size": world_size, **asdict(position)}
        (target / "meta.json").write_text(json.dumps(meta))
    barrier()  # every worker's file is written before "latest" moves
    if rank == 0:
        tmp = root / f".{LATEST}.tmp"
        tmp.write_text(name)
        os.replace(tmp, root / LATEST)
        for old in root.glob("step_*"):
            if old.name != name:
                shutil.rmtree(old, ignore_errors=True)


def load(checkpoint: Path, *, rank: int) -> tuple[dict[str, Any], dict[str, Any], Position]:
    import torch

    common = torch.load(checkpoint / "common.pt", map_location="cpu", weights_only=False)
    local = torch.load(checkpoint / f"rank{rank}.pt", map_location="cpu", weights_only=False)
    return common, local, Position(**common["position"])


def rng_state(device: torch.device) -> dict[str, Any]:
    """This worker's random generators: the CPU's (``rng``) and, on a GPU, that device's
    (``cuda_rng``), as ``rank<r>.pt`` keeps them."""
    import torch

    state: dict[str, Any] = {"rng": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda_rng"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(local: dict[str, Any], device: torch.device) -> None:
    """Put back what ``rng_state`` saved. A checkpoint written on the CPU has no GPU state: the
    GPU's generator keeps its seed."""
    import torch

    torch.set_rng_state(local["rng"])
    if device.type == "cuda" and "cuda_rng" in local:
        torch.cuda.set_rng_state(local["cuda_rng"], device)
