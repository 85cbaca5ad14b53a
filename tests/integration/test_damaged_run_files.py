"""Any damage to any file a real run wrote, read back by the command that reads it: ``gradsync
report`` for its metrics, summary and Hydra files, ``gradsync run trainer.resume=`` for its
checkpoint. Generated with Hypothesis: a file, then a cut at any length, bytes overwritten or
added at any place, or the file emptied.

The property, as a user would see it: exit code 0 or 2, no traceback, at most one line after
``gradsync: error:``, and no file the run wrote changed. A checkpoint file's damage is always
refused (exit 2) before any worker starts: its manifest holds every file's checksum.

The commands run in this process (``gradsync.cli.main``, what the console script calls), so an
example costs a fraction of a second rather than an interpreter's start; an exception that
escapes ``main`` is the traceback a user would have seen.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradsync.cli import main


@dataclass(frozen=True)
class Damage:
    kind: str
    """``cut`` (keep the first ``at`` bytes), ``overwrite`` (``data`` from ``at`` on), ``insert``
    (``data`` at ``at``), ``empty``."""
    at: float
    """Where, as a fraction of the file's length."""
    data: bytes

    def apply(self, path: Path) -> bool:
        """Damage ``path``; False when its content stayed the same."""
        original = path.read_bytes()
        at = min(int(self.at * len(original)), max(len(original) - 1, 0))
        damaged = {
            "cut": original[:at],
            "overwrite": original[:at] + self.data + original[at + len(self.data) :],
            "insert": original[:at] + self.data + original[at:],
            "empty": b"",
        }[self.kind]
        path.write_bytes(damaged)
        return damaged != original


DAMAGES = st.builds(
    Damage,
    kind=st.sampled_from(["cut", "overwrite", "insert", "empty"]),
    at=st.floats(min_value=0, max_value=1),
    data=st.binary(min_size=1, max_size=32),
)


def _files(run_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file())


def _digests(run_dir: Path) -> dict[str, str]:
    return {
        name: hashlib.sha256((run_dir / name).read_bytes()).hexdigest() for name in _files(run_dir)
    }


def _command(name: str, run_dir: Path, scratch: Path) -> list[str]:
    """The command that reads the file ``name`` of ``run_dir``."""
    if name.startswith("checkpoints/"):
        # The job that wrote it (the default one), resumed: it is done at step 2 already.
        return [
            "run",
            f"trainer.resume={run_dir}",
            "trainer.max_steps=2",
            f"hydra.run.dir={scratch}",
        ]
    return ["report", str(run_dir), "--out", str(scratch)]


def _run(argv: list[str]) -> tuple[int, str]:
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return code, err.getvalue()


@pytest.fixture(scope="module")
def written(written_run: Path) -> tuple[Path, list[str]]:
    files = _files(written_run)
    # What the property covers: every file a run with a checkpoint writes.
    assert {"metrics.jsonl", "summary.json", "checkpoints/latest"} <= set(files)
    assert any(name.endswith("manifest.json") for name in files)
    return written_run, files


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_damage_to_any_file_a_run_wrote_is_one_line_or_nothing(written, data):
    source, files = written
    name = data.draw(st.sampled_from(files), label="file")
    damage = data.draw(DAMAGES, label="damage")
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        shutil.copytree(source, run_dir)
        changed = damage.apply(run_dir / name)
        before = _digests(run_dir)
        code, stderr = _run(_command(name, run_dir, Path(tmp) / "out"))
        assert _digests(run_dir) == before, "the command changed a file the run wrote"
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("gradsync: error:")]
    if code == 0:
        assert errors == [], stderr
    else:
        assert code == 2, stderr
        assert errors == [stderr.strip().splitlines()[-1]], stderr
    checksummed = name.startswith("checkpoints/step_") and not name.endswith("manifest.json")
    if changed and checksummed:
        assert code == 2 and "checkpoint" in errors[0], stderr
