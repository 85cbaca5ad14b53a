"""A checkpoint's files, checked before a job resumes from it. Torch-free: the launcher checks
a checkpoint before any worker starts.

Rank 0 writes ``manifest.json`` last, once every rank has written its part: each file of the
checkpoint with its size and SHA-256. ``checkpoint_problem`` compares the files with it, reads
``meta.json`` and compares the identity of the job that wrote the checkpoint with the new
job's (``job_identity.py``). A checkpoint written before manifests (no ``format`` in its
``meta.json``) is checked without one: ``latest`` only ever named complete checkpoints, and the
workers turn a file that does not load into one line (``checkpoint.resume_from``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeGuard, TypeVar

from gradsync.train.job_identity import identity_difference

MANIFEST = "manifest.json"
META = "meta.json"
COMMON = "common.pt"
FORMAT = 2
"""``meta.json``'s ``format`` since checkpoints have a manifest and the job's identity (older
ones have no ``format``)."""
META_KEYS = ("world_size", "epoch", "batch_in_epoch", "step")
"""What every ``meta.json`` holds, each a count."""
AFTER_DAMAGE = "resume from an earlier run or start a new one"
T = TypeVar("T")
_BLOCK = 1 << 20  # hashed a MiB at a time, so a checkpoint of any size fits in memory


class _Damaged(Exception):
    """A file of the checkpoint is not what was written; ``str()`` says which and how."""


def rank_file(rank: int) -> str:
    return f"rank{rank}.pt"


def checkpoint_files(world_size: int) -> Iterator[str]:
    """The files every checkpoint of ``world_size`` workers has (lazily: a damaged meta.json
    may claim any world size)."""
    yield META
    yield COMMON
    for rank in range(world_size):
        yield rank_file(rank)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def write_entries(checkpoint: Path, names: Iterable[str]) -> None:
    """The size and checksum of each file ``names`` this rank just wrote, beside it: hashed by
    the rank that wrote it (its node's page cache, not a shared file system's reads by rank 0)
    and before the barrier, so no step after a checkpoint waits on the hashing."""
    for name in names:
        entry = {"bytes": (checkpoint / name).stat().st_size, "sha256": sha256(checkpoint / name)}
        _write_atomically(checkpoint / _entry_file(name), json.dumps(entry))


def write_manifest(checkpoint: Path, world_size: int) -> None:
    """Every file of the checkpoint with its size and checksum (from the entries each rank
    wrote, which it then removes), written atomically: a reader finds the whole manifest or
    none."""
    files = {name: _written_entry(checkpoint, name) for name in checkpoint_files(world_size)}
    _write_atomically(checkpoint / MANIFEST, json.dumps({"files": files}, indent=1))
    for name in files:
        (checkpoint / _entry_file(name)).unlink(missing_ok=True)


def _entry_file(name: str) -> str:
    return f".{name}.entry"


def _written_entry(checkpoint: Path, name: str) -> Any:
    try:
        return json.loads((checkpoint / _entry_file(name)).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # a rank that wrote none (or a cut one): hashed here instead
        return {"bytes": (checkpoint / name).stat().st_size, "sha256": sha256(checkpoint / name)}


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f"{path.name}.tmp")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def checkpoint_problem(checkpoint: Path, identity: Mapping[str, Any] | None = None) -> str | None:
    """Why a job whose identity is ``identity`` (``job_identity``; None: only the files) cannot
    resume from ``checkpoint``, in one line that names the file and what to do; None when it
    can. Reads the files and writes nothing."""
    try:
        meta = _verified_meta(checkpoint)
    except _Damaged as damage:
        return f"checkpoint {checkpoint}: {damage}; {AFTER_DAMAGE}"
    return _identity_problem(checkpoint, meta, identity or {})


def _verified_meta(checkpoint: Path) -> dict[str, Any]:
    """meta.json, once every file is the one the manifest lists and every file the checkpoint
    needs is there."""
    listed = _manifest(checkpoint)
    if listed is not None:
        _compare(checkpoint, listed)
    meta = _meta(checkpoint)
    if listed is None and "format" in meta:
        raise _Damaged(f"{MANIFEST} is missing (its saving did not finish)")
    for name in checkpoint_files(meta["world_size"]):
        if listed is not None and name not in listed:
            raise _Damaged(f"{MANIFEST} does not list {name}")
        if not (checkpoint / name).is_file():
            raise _Damaged(f"{name} is missing")
    return meta


def _identity_problem(
    checkpoint: Path, meta: Mapping[str, Any], identity: Mapping[str, Any]
) -> str | None:
    written_by, workers = meta["world_size"], identity.get("trainer.workers")
    if workers is not None and written_by != workers:
        return (
            f"checkpoint {checkpoint} was written by {written_by} workers (their error-feedback "
            f"state is per worker); resume with trainer.workers={written_by}"
        )
    saved = meta.get("identity")
    difference = identity_difference(saved, identity) if saved else None
    return (
        None if difference is None else f"checkpoint {checkpoint} {difference}, or start a new run"
    )


# ---- the files -----------------------------------------------------------------------------
def _manifest(checkpoint: Path) -> dict[str, tuple[int, str]] | None:
    """``{file: (bytes, sha256)}`` as the manifest lists them; None when there is none."""
    if not (checkpoint / MANIFEST).exists():
        return None
    files = _json_object(checkpoint, MANIFEST).get("files")
    if not isinstance(files, dict):
        raise _Damaged(f"{MANIFEST} is damaged (it lists no files)")
    return {_plain_name(name): _entry(name, entry) for name, entry in files.items()}


def _plain_name(name: str) -> str:
    if name in ("", ".", "..") or Path(name).name != name:
        raise _Damaged(f"{MANIFEST} is damaged (it lists {json.dumps(name)})")
    return name


def _entry(name: str, entry: Any) -> tuple[int, str]:
    size = entry.get("bytes") if isinstance(entry, dict) else None
    digest = entry.get("sha256") if isinstance(entry, dict) else None
    if not _is_count(size) or not isinstance(digest, str):
        raise _Damaged(f"{MANIFEST} is damaged (its entry of {json.dumps(name)})")
    return size, digest


def _compare(checkpoint: Path, listed: Mapping[str, tuple[int, str]]) -> None:
    """Sizes first (no file read), then checksums."""
    for name, (size, _) in listed.items():
        path = checkpoint / name
        if not path.is_file():
            raise _Damaged(f"{name} is missing ({MANIFEST} lists it)")
        found = _read(path, _size)
        if found != size:
            raise _Damaged(f"{name} is damaged ({found} bytes, {MANIFEST} says {size})")
    for name, (_, digest) in listed.items():
        if _read(checkpoint / name, sha256) != digest:
            raise _Damaged(f"{name} is damaged (its checksum differs from {MANIFEST}'s)")


def _read(path: Path, read: Callable[[Path], T]) -> T:
    """``read(path)``; a file that cannot be read (no permission, gone meanwhile) is
    ``_Damaged``."""
    try:
        return read(path)
    except OSError as exc:
        raise _Damaged(f"{path.name} cannot be read ({exc.strerror or exc})") from None


def _size(path: Path) -> int:
    return path.stat().st_size


def _meta(checkpoint: Path) -> dict[str, Any]:
    if not (checkpoint / META).exists():
        raise _Damaged(f"{META} is missing")
    meta = _json_object(checkpoint, META)
    for key in META_KEYS:
        if not _is_count(meta.get(key)):
            raise _Damaged(f"{META} is damaged (no count {key})")
    if meta["world_size"] < 1:
        raise _Damaged(f"{META} is damaged (world_size {meta['world_size']})")
    identity = meta.get("identity")
    if identity is not None and not isinstance(identity, dict):
        raise _Damaged(f"{META} is damaged (its identity is not a mapping)")
    return meta


def _json_object(checkpoint: Path, name: str) -> dict[str, Any]:
    try:
        value = json.loads((checkpoint / name).read_bytes().decode("utf-8"))
    except OSError as exc:
        raise _Damaged(f"{name} cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise _Damaged(f"{name} is damaged (not text)") from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise _Damaged(f"{name} is damaged (not JSON: {exc.msg}, {where})") from None
    except (ValueError, RecursionError):  # a number too long to convert, nesting too deep
        raise _Damaged(f"{name} is damaged (not JSON that gradsync writes)") from None
    if not isinstance(value, dict):
        raise _Damaged(f"{name} is damaged (not a JSON object)")
    return value


def _is_count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
