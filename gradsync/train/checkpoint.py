"""Resumable checkpoints shared by all workers.

Layout: ``<run_dir>/checkpoints/step_<N>/`` holds ``common.pt`` (model, optimizer, LR schedule,
fp16's loss scale, position; written by rank 0), ``rank<r>.pt`` (that worker's synchronization
state such as error feedback residuals, and its RNG states: the CPU's, and its GPU's when it
trains on one), ``meta.json`` (world size, position, the identity of the job that wrote it:
``job_identity.py``) and, written last, ``manifest.json`` (each file's size and checksum:
``checkpoint_manifest.py``). ``checkpoints/latest`` names the newest complete one; it is
replaced atomically only after every rank has written its part and the manifest is there, so
a crash while saving leaves the previous checkpoint in place.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradsync.config.checks import SettingError
from gradsync.train.checkpoint_manifest import (
    AFTER_DAMAGE,
    COMMON,
    FORMAT,
    MANIFEST,
    META,
    rank_file,
    write_entries,
    write_manifest,
)

if TYPE_CHECKING:
    import torch

LATEST = "latest"
_LONGEST_NAME = 255  # of a file name: a longer ``latest`` names no checkpoint
_NO_LATEST = "resume from one of its checkpoints/step_* directories, or start a new run"


@dataclass(frozen=True)
class Position:
    epoch: int
    """Epoch to continue in."""
    batch_in_epoch: int
    """Batches of that epoch already trained."""
    step: int
    """Optimizer steps taken so far."""


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory from a checkpoint or run directory; ValueError (one line) if
    there is none, or if the run's ``checkpoints/latest`` names none."""
    path = Path(path).expanduser()
    if any((path / name).is_file() for name in (COMMON, META, MANIFEST)):
        return path  # checked file by file before use (checkpoint_problem)
    pointer = path / "checkpoints" / LATEST
    if pointer.is_file():
        return _named_by(pointer)
    if not path.exists():
        raise ValueError(f"trainer.resume={path} does not exist")
    raise ValueError(
        f"trainer.resume={path} holds no checkpoint: pass a run directory with checkpoints/ "
        "or a checkpoints/step_* directory"
    )


def _named_by(pointer: Path) -> Path:
    try:
        with pointer.open("rb") as file:
            raw = file.read(_LONGEST_NAME + 1)
        name = raw.decode("utf-8").strip()
    except OSError as exc:
        raise ValueError(
            f"{pointer} cannot be read ({exc.strerror or exc}); {_NO_LATEST}"
        ) from None
    except UnicodeDecodeError:
        raise ValueError(f"{pointer} is damaged (not text); {_NO_LATEST}") from None
    if not name:
        raise ValueError(f"{pointer} is empty; {_NO_LATEST}")
    target = pointer.parent / name
    if len(raw) > _LONGEST_NAME or Path(name).name != name or not target.is_dir():
        shown = json.dumps(name[:60] + ("..." if len(name) > 60 else ""))
        raise ValueError(
            f"{pointer} names {shown}, which is no directory of {pointer.parent}; {_NO_LATEST}"
        )
    return target


def save(
    run_dir: Path,
    *,
    rank: int,
    world_size: int,
    position: Position,
    common: dict[str, Any],
    local: dict[str, Any],
    barrier: Callable[[], None],
    identity: Mapping[str, Any] | None = None,
) -> None:
    """Every rank's part of the checkpoint at ``position``; rank 0 then writes the manifest
    and moves ``latest``. ``identity``: the job's (``job_identity``), compared with the job
    that resumes (None: not recorded)."""
    import torch  # imported here: the launcher resolves checkpoint paths without torch

    root = run_dir / "checkpoints"
    name = f"step_{position.step:08d}"
    target = root / name
    target.mkdir(parents=True, exist_ok=True)
    torch.save(local, target / rank_file(rank))
    written = [rank_file(rank)]
    if rank == 0:
        torch.save({**common, "position": asdict(position)}, target / COMMON)
        meta = {"world_size": world_size, **asdict(position), "format": FORMAT}
        meta["identity"] = dict(identity) if identity is not None else None
        (target / META).write_text(json.dumps(meta))
        written += [COMMON, META]
    write_entries(target, written)
    barrier()  # every worker's file and its entry are written before the manifest lists them
    if rank == 0:
        write_manifest(target, world_size)  # last: "latest" names only a whole checkpoint
        tmp = root / f".{LATEST}.tmp"
        tmp.write_text(name)
        os.replace(tmp, root / LATEST)
        for old in root.glob("step_*"):
            if old.name != name:
                shutil.rmtree(old, ignore_errors=True)


def load(checkpoint: Path, *, rank: int) -> tuple[dict[str, Any], dict[str, Any], Position]:
    """The checkpoint's common part, this rank's part and the position; a file that cannot be
    read is one line naming it (SettingError)."""
    common = _loaded(checkpoint, COMMON)
    local = _loaded(checkpoint, rank_file(rank))
    try:
        return common, local, Position(**common["position"])
    except (KeyError, TypeError):
        raise SettingError(
            f"checkpoint {checkpoint}: {COMMON} holds no position; {AFTER_DAMAGE}"
        ) from None


def _loaded(checkpoint: Path, name: str) -> dict[str, Any]:
    import torch

    try:
        state = torch.load(checkpoint / name, map_location="cpu", weights_only=False)
    except Exception as exc:  # whatever unpickling a damaged file raises (any type it names)
        raise SettingError(
            f"checkpoint {checkpoint}: {name} cannot be read ({_cause(exc)}); {AFTER_DAMAGE}"
        ) from None
    if not isinstance(state, dict):
        raise SettingError(f"checkpoint {checkpoint}: {name} holds no state; {AFTER_DAMAGE}")
    return state


def resume_from(resume: str, restore: Callable[[Path], None]) -> None:
    """``restore`` (a trainer's) from the checkpoint ``trainer.resume`` names. The launcher
    checked it, but it may have changed since (a file that cannot be read is one line naming it,
    ``load``'s), and one from before manifests was neither hashed nor of a known identity: one
    that does not load into this job is one line (SettingError, which a worker reports alone),
    never a traceback."""
    try:
        checkpoint = resolve_checkpoint(resume)
    except ValueError as exc:
        raise SettingError(str(exc)) from None
    if (checkpoint / MANIFEST).exists():
        # Checked whole and of this job's identity by the launcher: what still fails to load
        # is a fault in gradsync, whose traceback its report must keep.
        restore(checkpoint)
        return
    try:
        restore(checkpoint)
    except SettingError:
        raise
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as exc:
        # A state of another shape or kind (load_state_dict's): its first lines say which.
        raise SettingError(
            f"checkpoint {checkpoint} does not fit this job ({_cause(exc)}); resume with the "
            "settings it was written with (its meta.json), or start a new run"
        ) from None


def _cause(exc: BaseException, longest: int = 200) -> str:
    """An exception's first two lines as one ("Error(s) in loading state_dict for MLP:" says
    what, the next line which keys), cut at ``longest`` characters."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()][:2]
    text = " ".join(lines) or type(exc).__name__
    return text if len(text) <= longest else text[: longest - 3] + "..."


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
