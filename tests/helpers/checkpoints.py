"""Checkpoints written by the real ``checkpoint.save`` in this process, for the tests that check
them before a job resumes: every rank's part in turn (rank 0 last: its meta.json, the manifest,
``latest``), the barrier a no-op unless one is given."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gradsync.train import checkpoint


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))


def save_checkpoint(
    run_dir: Path,
    *,
    workers: int,
    step: int = 3,
    identity: Mapping[str, Any] | None = None,
    barrier: Callable[[], None] | None = None,
) -> Path:
    """A checkpoint of ``workers`` ranks at ``step`` (a model and its SGD state, each rank's
    residual and RNG state); its directory."""
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(8, 16)).sum().backward()
    optimizer.step()
    for rank in reversed(range(workers)):
        checkpoint.save(
            run_dir,
            rank=rank,
            world_size=workers,
            position=checkpoint.Position(epoch=0, batch_in_epoch=step, step=step),
            common={"model": model.state_dict(), "optimizer": optimizer.state_dict()},
            local={"sync": {"residual": torch.randn(100)}, "rng": torch.get_rng_state()},
            barrier=barrier or (lambda: None),
            identity=identity,
        )
    return run_dir / "checkpoints" / f"step_{step:08d}"


def random_bytes(path: Path, extra: int = 0) -> None:
    """The file's bytes replaced by as many random ones (plus ``extra``): only a checksum
    tells the first from what was written."""
    path.write_bytes(random.Random(path.name).randbytes(path.stat().st_size + extra))


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
