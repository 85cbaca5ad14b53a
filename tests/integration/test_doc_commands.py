"""Every shell command in README.md and docs/ is checked (tests/helpers/doc_commands.py), and
the quick start is run for real, so the examples a newcomer copies keep working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradsync.config.compose import ConfigError
from tests.helpers.doc_commands import DocCommand, check, commands, documents

DOCUMENTED = [command for page in documents() for command in commands(page)]


def _id(command: DocCommand) -> str:
    return f"{command.where}:{' '.join(command.words[:3])}"


def test_the_documents_have_commands() -> None:
    pages = {command.path for command in DOCUMENTED}
    assert "README.md" in pages
    assert any(page.startswith("docs/guide/") for page in pages)


@pytest.mark.parametrize("command", DOCUMENTED, ids=_id)
def test_documented_command_is_valid(command: DocCommand) -> None:
    check(command)


@pytest.mark.parametrize("command", [c for c in DOCUMENTED if c.runs], ids=_id)
def test_quick_start_command_runs(command: DocCommand, tmp_path: Path) -> None:
    words = list(command.words)
    assert words[0] == "gradsync", f"{command.where}: only gradsync commands run for real"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-m", "gradsync", *words[1:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, f"{command.where}: {done.stderr[-2000:]}"


def _page(tmp_path: Path, body: str) -> list[DocCommand]:
    page = tmp_path / "page.md"
    page.write_text(body, encoding="utf-8")
    return list(commands(page, root=tmp_path))


def test_a_broken_command_fails_its_check(tmp_path: Path) -> None:
    found = _page(
        tmp_path,
        "text\n\n```bash\ngradsync run compressor=topkk  # a typo\n"
        "gradsync run -m compressor=topk,powersgd scheduler=deft \\\n    trainer.workers=2\n"
        "frobnicate --all\n```\n\n```text\nnot a command\n```\n",
    )
    assert [c.words[:2] for c in found] == [
        ("gradsync", "run"),
        ("gradsync", "run"),
        ("frobnicate", "--all"),
    ]
    with pytest.raises(ConfigError, match="unknown compressor 'topkk'"):
        check(found[0])
    with pytest.raises(ConfigError, match="powersgd"):
        check(found[1])  # one combination of the sweep is refused
    with pytest.raises(AssertionError, match="no check for 'frobnicate'"):
        check(found[2])
