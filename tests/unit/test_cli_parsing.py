"""Every command parses its arguments the same way: options and overrides in any order, a
mistake as one line that names the command's --help, -h/--help printing the command's text."""

from __future__ import annotations

import sys

import pytest

from gradsync import families
from gradsync.cli import sweep
from gradsync.cli.command import CommandParser
from gradsync.cli.run import _run_in_hydra
from gradsync.jobs.compose import ConfigError


def _parser() -> CommandParser:
    parser = CommandParser("demo", help_text=lambda: "usage: gradsync demo [key=value ...]")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--workers", type=int)
    return parser


def test_options_and_overrides_come_in_any_order():
    parsed = _parser().parse(["a=1", "--workers", "4", "b=2"])
    assert parsed.overrides == ["a=1", "b=2"] and parsed.workers == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bogus"], "unknown option --bogus; see gradsync demo --help"),
        (["--workers", "four"], "argument --workers: invalid int value: 'four'; see gradsync demo"),
        (["--workers"], "argument --workers: expected one argument; see gradsync demo --help"),
    ],
)
def test_a_mistake_is_one_line_naming_the_help(args, message):
    with pytest.raises(ConfigError) as raised:
        _parser().parse(args)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


def test_help_prints_the_commands_text_and_parses_nothing(capsys):
    assert _parser().parse(["a=1", "--help", "--bogus"]) is None
    assert capsys.readouterr().out == "usage: gradsync demo [key=value ...]\n"


def test_sweep_takes_one_of_its_modes(capsys):
    assert sweep.main(["a=1"]) == 2
    assert "unexpected argument a=1; see gradsync sweep --help" in capsys.readouterr().err
    assert sweep.main(["--list", "x=1", "--summarize", "dir"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert sweep.main([]) == 2
    assert "usage: gradsync sweep --list OVERRIDE..." in capsys.readouterr().err


def test_hydra_gets_the_arguments_and_the_command_line_is_left_as_it_was(capsys, monkeypatch):
    families.register()
    monkeypatch.setattr(sys, "argv", ["pytest", "-q"])
    _run_in_hydra(["--cfg", "job", "trainer.workers=3"])
    assert "workers: 3" in capsys.readouterr().out
    assert sys.argv == ["pytest", "-q"]
