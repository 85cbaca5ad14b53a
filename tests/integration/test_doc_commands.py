"""Every shell command in README.md and docs/ is checked (tests/helpers/doc_commands.py), and
the quick start is run for real, so the examples a newcomer copies keep working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradsync.jobs.compose import ConfigError
from tests.helpers.doc_commands import (
    DocCommand,
    check,
    commands,
    documents,
    without_settings,
)

DOCUMENTED = [command for page in documents() for command in commands(page)]
# The same command in several places is checked once, at its first place.
DISTINCT = list({command.words: command for command in reversed(DOCUMENTED)}.values())[::-1]


def _id(command: DocCommand) -> str:
    return f"{command.where}:{' '.join(command.words[:3])}"


def test_the_documents_have_commands() -> None:
    pages = {command.path for command in DOCUMENTED}
    assert "README.md" in pages
    assert any(page.startswith("docs/guide/") for page in pages)


@pytest.mark.parametrize("command", DISTINCT, ids=_id)
def test_documented_command_is_valid(command: DocCommand) -> None:
    check(command)


RUN_BLOCKS = sorted({(c.path, c.block) for c in DOCUMENTED if c.runs})


def test_the_quick_start_is_run() -> None:
    assert any(path == "README.md" for path, _ in RUN_BLOCKS), "mark the README's quick start"


@pytest.mark.parametrize(("path", "block"), RUN_BLOCKS, ids=[f"{p}#{b}" for p, b in RUN_BLOCKS])
def test_marked_block_runs(path: str, block: int, tmp_path: Path) -> None:
    """The block's commands one after another in one fresh directory, as a reader types them."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for command in [c for c in DOCUMENTED if (c.path, c.block) == (path, block)]:
        words = without_settings(list(command.words))
        assert words[0] == "gradsync", f"{command.where}: only gradsync commands run for real"
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
        "frobnicate --all\n```\n\n```text\nnot a command\n```\n\n"
        "```console\n$ gradsync run\n```\n",
    )
    assert [c.words[:2] for c in found] == [
        ("gradsync", "run"),
        ("gradsync", "run"),
        ("frobnicate", "--all"),
        ("```console",),
    ]
    assert [c.line for c in found] == [4, 5, 7, 14]
    with pytest.raises(ConfigError, match="unknown compressor 'topkk'"):
        check(found[0])
    with pytest.raises(ConfigError, match="powersgd"):
        check(found[1])  # one combination of the sweep is refused
    with pytest.raises(AssertionError, match="no check for 'frobnicate'"):
        check(found[2])
    with pytest.raises(AssertionError, match="mark shell blocks ```bash"):
        check(found[3])


def test_settings_and_sudo_are_not_the_command() -> None:
    words = ["GRADSYNC_FAULT=1:3", "sudo", "-E", "gradsync", "run"]
    assert without_settings(words) == ["gradsync", "run"]
