"""A checkpoint is checked before a job resumes from it, in one line that names the file: each
file against the manifest written last (sizes and checksums), meta.json, ``latest``, and the
identity of the job that wrote it against the new job's. The checkpoints are written by the
real ``checkpoint.save`` (every rank in turn, the barrier a no-op) and then damaged on disk."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from torch import nn

from gradsync.config.checks import SettingError
from gradsync.jobs.compose import ConfigError, compose_all, compose_jobs, write_resolved
from gradsync.jobs.discovery import group_options
from gradsync.train import checkpoint
from gradsync.train.checkpoint_manifest import MANIFEST, checkpoint_problem
from gradsync.train.job_identity import GROUPS, job_identity
from tests.helpers.checkpoints import random_bytes, save_checkpoint, snapshot

WORKERS = 2
FILES = ("common.pt", "rank0.pt", "rank1.pt", "meta.json")
AFTER = "resume from an earlier run or start a new one"


def _save(run_dir: Path, *, step: int = 3, identity: dict | None = None, barrier=None) -> Path:
    return save_checkpoint(run_dir, workers=WORKERS, step=step, identity=identity, barrier=barrier)


def _one_line(text: str | None) -> str:
    assert text is not None
    assert "\n" not in text and text.strip() == text
    return text


# ---- damage, as a disk, a copy or a person leaves it ------------------------------------------
def _cut(fraction: float) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * fraction)])

    return damage


def _cut_last_byte(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-1])


def _random_bytes(path: Path) -> None:
    random_bytes(path)


def _random_bytes_longer(path: Path) -> None:
    random_bytes(path, extra=7)


def _emptied(path: Path) -> None:
    path.write_bytes(b"")


def _deleted(path: Path) -> None:
    path.unlink()


def _first_byte_only(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:1])


DAMAGE = {
    "emptied": _emptied,
    "first_byte_only": _first_byte_only,
    "half": _cut(0.5),
    "last_byte_cut": _cut_last_byte,
    "random_bytes": _random_bytes,
    "random_bytes_longer": _random_bytes_longer,
    "deleted": _deleted,
}


def test_the_manifest_lists_every_file_with_its_size_and_checksum(tmp_path):
    saved = _save(tmp_path)
    files = json.loads((saved / MANIFEST).read_text())["files"]
    assert sorted(files) == sorted(FILES)
    for name, entry in files.items():
        data = (saved / name).read_bytes()
        assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert checkpoint.resolve_checkpoint(tmp_path) == saved
    assert checkpoint_problem(saved) is None
    # Each rank hashed what it wrote; the entries it left for rank 0 are gone with the manifest.
    assert sorted(p.name for p in saved.iterdir()) == sorted([*FILES, MANIFEST])


def test_the_manifest_has_each_ranks_own_entry_for_its_file(tmp_path):
    """Rank 0 lists what each rank hashed before the barrier: it reads no other rank's file."""
    seen = []

    def barrier() -> None:
        seen.append(sorted(p.name for p in (tmp_path / "checkpoints").rglob(".*.entry")))

    saved = _save(tmp_path, barrier=barrier)
    assert seen[0] == [".rank1.pt.entry"]  # rank 1 saved first (``save_checkpoint``)
    assert seen[-1] == sorted(
        [".common.pt.entry", ".meta.json.entry", ".rank0.pt.entry", ".rank1.pt.entry"]
    )
    assert checkpoint_problem(saved) is None


def test_latest_moves_only_once_the_manifest_is_written(tmp_path):
    first = _save(tmp_path, step=3)

    waited = []

    def lost_peer() -> None:  # rank 1 saved, then died: rank 0's barrier fails
        waited.append(1)
        if len(waited) == WORKERS:
            raise RuntimeError("a peer died while saving")

    with pytest.raises(RuntimeError):
        _save(tmp_path, step=6, barrier=lost_peer)
    unfinished = tmp_path / "checkpoints" / "step_00000006"
    assert checkpoint.resolve_checkpoint(tmp_path) == first
    assert not (unfinished / MANIFEST).exists()
    assert _one_line(checkpoint_problem(unfinished)) == (
        f"checkpoint {unfinished}: manifest.json is missing (its saving did not finish); {AFTER}"
    )


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
@pytest.mark.parametrize("name", [*FILES, MANIFEST])
def test_a_damaged_file_is_one_line_that_names_it(tmp_path, name, damage):
    saved = _save(tmp_path)
    damage(saved / name)
    before = snapshot(tmp_path)
    problem = _one_line(checkpoint_problem(saved))
    assert problem.startswith(f"checkpoint {saved}: {name} ")
    assert problem.endswith(AFTER)
    assert snapshot(tmp_path) == before  # checking wrote nothing


def test_the_line_says_how_the_file_differs(tmp_path):
    saved = _save(tmp_path)
    _random_bytes(saved / "rank1.pt")
    assert checkpoint_problem(saved) == (
        f"checkpoint {saved}: rank1.pt is damaged (its checksum differs from manifest.json's); "
        f"{AFTER}"
    )
    size = (saved / "common.pt").stat().st_size
    _cut(0.5)(saved / "common.pt")
    assert f"common.pt is damaged ({size // 2} bytes, manifest.json says {size})" in _one_line(
        checkpoint_problem(saved)
    )


# ---- a checkpoint from before manifests ----------------------------------------------------
def _legacy(saved: Path) -> Path:
    """As gradsync wrote checkpoints before manifests: meta.json of world size and position."""
    (saved / MANIFEST).unlink()
    meta = json.loads((saved / "meta.json").read_text())
    old = {key: meta[key] for key in ("world_size", "epoch", "batch_in_epoch", "step")}
    (saved / "meta.json").write_text(json.dumps(old))
    return saved


META_DAMAGE = {
    "truncated": lambda text: text[: len(text) // 2],
    "not_json": lambda text: "world_size: 2",
    "not_an_object": lambda text: "[2, 0, 3, 3]",
    "no_world_size": lambda text: json.dumps({"epoch": 0, "batch_in_epoch": 3, "step": 3}),
    "world_size_text": lambda text: text.replace("2", '"2"', 1),
    "binary": lambda text: "\udcff",
}


@pytest.mark.parametrize("damage", META_DAMAGE.values(), ids=META_DAMAGE.keys())
def test_a_damaged_meta_json_without_a_manifest_is_one_line(tmp_path, damage):
    saved = _legacy(_save(tmp_path))
    meta = saved / "meta.json"
    meta.write_bytes(damage(meta.read_text()).encode("utf-8", "surrogateescape"))
    problem = _one_line(checkpoint_problem(saved, {"trainer.workers": WORKERS}))
    assert problem.startswith(f"checkpoint {saved}: meta.json is damaged (")


def test_a_checkpoint_from_before_manifests_resumes_with_the_old_checks(tmp_path):
    saved = _legacy(_save(tmp_path))
    assert checkpoint_problem(saved, {"trainer.workers": WORKERS, "model": "another"}) is None
    (saved / "rank1.pt").unlink()
    assert checkpoint_problem(saved) == f"checkpoint {saved}: rank1.pt is missing; {AFTER}"


@pytest.mark.parametrize(
    "damage", [_emptied, _cut(0.5), _random_bytes], ids=["empty", "cut", "random"]
)
@pytest.mark.parametrize("name", ["common.pt", "rank1.pt"])
def test_a_worker_loading_a_damaged_file_says_one_line(tmp_path, name, damage):
    """Without a manifest the launcher cannot tell: the worker's load names the file."""
    saved = _legacy(_save(tmp_path))
    damage(saved / name)
    with pytest.raises(SettingError) as info:
        checkpoint.resume_from(str(tmp_path), lambda path: checkpoint.load(path, rank=1))
    message = _one_line(str(info.value))
    assert message.startswith(f"checkpoint {saved}: {name} cannot be read (")
    assert message.endswith(AFTER)


def test_a_state_that_does_not_fit_the_model_is_one_line(tmp_path):
    """From before manifests (no identity to check first): the worker's load says it."""
    _legacy(_save(tmp_path))

    def restore(path: Path) -> None:  # as the trainer does, into another model
        common, _, _ = checkpoint.load(path, rank=0)
        nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 4)).load_state_dict(
            common["model"]
        )

    with pytest.raises(SettingError) as info:
        checkpoint.resume_from(str(tmp_path), restore)
    message = _one_line(str(info.value))
    assert "does not fit this job (Error(s) in loading state_dict for Sequential: size " in message


def test_a_checked_checkpoint_that_fails_to_load_keeps_its_traceback(tmp_path):
    """A checkpoint the launcher checked whole and of this job: a failure to load it is a
    fault in gradsync, not in the input, and its report keeps the traceback."""
    _save(tmp_path)

    def restore(path: Path) -> None:
        raise KeyError("a scheduler state without its key")

    with pytest.raises(KeyError):
        checkpoint.resume_from(str(tmp_path), restore)


# ---- latest ---------------------------------------------------------------------------------
LATEST_DAMAGE = {
    "missing_step": (b"step_00000009", 'names "step_00000009", which is no directory of'),
    "empty": (b"", "is empty"),
    "blank": (b" \n", "is empty"),
    "binary": (b"\xff\xfe\x00step", "is damaged (not text)"),
    "outside": (b"../../..", 'names "../../..", which is no directory of'),
    "two_lines": (b"step_00000003\nstep_00000006", 'names "step_00000003\\nstep_00000006"'),
    "long": (b"s" * 5000, "which is no directory of"),
}


@pytest.mark.parametrize(("text", "says"), LATEST_DAMAGE.values(), ids=LATEST_DAMAGE.keys())
def test_latest_naming_no_checkpoint_is_one_line(tmp_path, text, says):
    _save(tmp_path)
    latest = tmp_path / "checkpoints" / "latest"
    latest.write_bytes(text)
    with pytest.raises(ValueError) as info:
        checkpoint.resolve_checkpoint(tmp_path)
    message = _one_line(str(info.value))
    assert message.startswith(f"{latest} ") and says in message
    assert message.endswith(
        "resume from one of its checkpoints/step_* directories, or start a new run"
    )
    with pytest.raises(SettingError, match="resume from one of its"):  # in a worker, one line too
        checkpoint.resume_from(str(tmp_path), lambda path: None)


# ---- through the launcher's checks, and the job's identity ------------------------------------
@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """A run directory whose checkpoint was written by the default job with two workers."""
    (job,) = compose_all([[f"trainer.workers={WORKERS}"]])
    run_dir = tmp_path_factory.mktemp("run")
    _save(run_dir, identity=job_identity(job))
    return run_dir


def _resume(run_dir: Path, *overrides: str) -> None:
    compose_jobs(
        [f"trainer.resume={run_dir}", f"trainer.workers={WORKERS}", *overrides],
        multirun=False,
        launcher_here=False,
    )


IDENTITY_CASES = [
    (["model=mlp"], "model=cnn, this job has model=mlp: resume with model=cnn"),
    (
        ["model.hidden=128"],
        "model.hidden=64, this job has model.hidden=128: resume with model.hidden=64",
    ),
    (["dataset=synthetic"], "dataset=digits, this job has dataset=synthetic"),
    (["compressor=topk"], "compressor=none, this job has compressor=topk"),
    (["scheduler=bytescheduler"], "scheduler=allreduce, this job has scheduler=bytescheduler"),
    (["trainer.precision=bf16"], "trainer.precision=fp32, this job has trainer.precision=bf16"),
]


@pytest.mark.parametrize(
    ("overrides", "says"), IDENTITY_CASES, ids=[" ".join(c[0]) for c in IDENTITY_CASES]
)
def test_a_job_of_another_identity_is_refused_before_any_worker_starts(written, overrides, says):
    saved = checkpoint.resolve_checkpoint(written)
    with pytest.raises(ConfigError) as info:
        _resume(written, *overrides)
    message = _one_line(str(info.value))
    assert message.startswith(f"checkpoint {saved} was written with {says}")
    assert message.endswith(", or start a new run")


def test_what_may_change_on_resume_does_not_stop_it(written):
    _resume(
        written,
        "trainer.lr=0.2",
        "trainer.epochs=3",
        "trainer.max_steps=50",
        "trainer.log_every=1",
        "trainer.batch_size=16",
        "trainer.seed=7",
        "dataset.split_seed=3",
    )


@pytest.mark.parametrize(
    ("compressor", "changed"),
    [("randomk", "trainer.seed=7"), ("dgc", "trainer.momentum=0.5"), ("qsgd", "compressor.seed=3")],
)
def test_a_compressor_setting_that_follows_the_trainer_may_change_on_resume(
    tmp_path, compressor, changed
):
    """``compressor.seed`` is ``trainer.seed`` (DGC's momentum ``trainer.momentum``) unless set:
    it may change on resume as that setting may."""
    job_of = [f"trainer.workers={WORKERS}", f"compressor={compressor}", "trainer.nesterov=false"]
    (job,) = compose_all([job_of])
    _save(tmp_path, identity=job_identity(job))
    _resume(tmp_path, f"compressor={compressor}", "trainer.nesterov=false", changed)


def test_the_worker_count_keeps_its_own_line(written):
    saved = checkpoint.resolve_checkpoint(written)
    with pytest.raises(ConfigError) as info:
        compose_jobs(
            [f"trainer.resume={written}", "trainer.workers=1"], multirun=False, launcher_here=False
        )
    assert str(info.value) == (
        f"checkpoint {saved} was written by 2 workers (their error-feedback state is per worker); "
        "resume with trainer.workers=2"
    )


@pytest.mark.parametrize(
    ("name", "damage"),
    [("meta.json", _cut(0.5)), ("rank1.pt", _random_bytes)],
    ids=["meta_cut", "rank_random"],
)
def test_the_launcher_refuses_a_damaged_checkpoint_in_one_line(tmp_path, written, name, damage):
    run_dir = tmp_path / "copy"
    for path, data in snapshot(written).items():
        (run_dir / path).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / path).write_bytes(data)
    saved = checkpoint.resolve_checkpoint(run_dir)
    damage(saved / name)
    with pytest.raises(ConfigError) as info:
        _resume(run_dir)
    assert _one_line(str(info.value)).startswith(f"checkpoint {saved}: {name} ")


def test_the_launcher_refuses_latest_naming_a_missing_step(tmp_path):
    _save(tmp_path)
    (tmp_path / "checkpoints" / "latest").write_text("step_00000042")
    with pytest.raises(ConfigError, match='latest names "step_00000042", which is no directory'):
        _resume(tmp_path)


OPTIONS = {group: group_options()[group] for group in GROUPS}
JOBS = [  # every option of each group at least once, in as few jobs
    [f"{group}={options[i % len(options)]}" for group, options in OPTIONS.items()]
    for i in range(max(len(options) for options in OPTIONS.values()))
]


def test_the_launcher_and_the_workers_see_the_same_identity(tmp_path):
    """The launcher's from the typed config, a worker's from the resolved YAML it loads."""
    for overrides, job in zip(JOBS, compose_all(JOBS), strict=True):
        write_resolved(job, tmp_path / "config.yaml")
        loaded = OmegaConf.load(tmp_path / "config.yaml")
        assert job_identity(OmegaConf.to_object(job)) == job_identity(loaded), overrides
