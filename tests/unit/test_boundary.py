"""The one-way boundary: ``runners`` may import gradsync, nothing in gradsync
imports ``runners``, at module level or inside a function. gradsync reaches a runner only as
an object built from the config's ``runner._target_`` by the one instantiate call site."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gradsync

FORBIDDEN = "runners"
DYNAMIC_IMPORTS = ("__import__", "import_module")


def _names_forbidden(module: str | None) -> bool:
    return module is not None and (module == FORBIDDEN or module.startswith(f"{FORBIDDEN}."))


def _dynamic_target(call: ast.Call) -> str | None:
    """The module a call to ``__import__`` or ``importlib.import_module`` names, when literal."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    if name not in DYNAMIC_IMPORTS or not call.args:
        return None
    first = call.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def imports_of_runners(source: str) -> list[int]:
    """Lines of ``source`` that import ``runners`` or one of its modules."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found = any(_names_forbidden(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found = node.level == 0 and _names_forbidden(node.module)
        elif isinstance(node, ast.Call):
            found = _names_forbidden(_dynamic_target(node))
        else:
            continue
        if found:
            lines.append(node.lineno)
    return sorted(lines)


@pytest.mark.parametrize(
    "source",
    [
        "import runners",
        "import runners.local as local",
        "import os, runners.netem",
        "from runners import testbed",
        "from runners.base import Launch",
        "def f():\n    from runners.testbed import rate_mbit\n    return rate_mbit",
        "class C:\n    def m(self):\n        import runners.slurm",
        "if True:\n    try:\n        import runners\n    except ImportError:\n        pass",
        "import importlib\nimportlib.import_module('runners.local')",
        "__import__('runners')",
    ],
)
def test_every_way_of_importing_runners_is_caught(source):
    assert imports_of_runners(source)


@pytest.mark.parametrize(
    "source",
    [
        "import runnersx",
        "from gradsync.launch import Runner",
        "from .runners import x",  # a module of gradsync's own that happens to be named so
        "TARGET = 'runners.local.LocalRunner'",  # a config value, built by instantiate
        "runners = [1, 2]",
    ],
)
def test_names_that_only_look_like_runners_pass(source):
    assert imports_of_runners(source) == []


def test_nothing_in_gradsync_imports_runners():
    package = Path(gradsync.__file__).parent
    sources = sorted(package.rglob("*.py"))
    assert len(sources) > 50  # the whole package was walked
    offenders = [
        f"{path.relative_to(package.parent)}:{line}"
        for path in sources
        for line in imports_of_runners(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], "gradsync must not import runners: " + ", ".join(offenders)


# ---- the other way: runners implement what gradsync asks of them ------------------------------
def test_runners_that_start_ranks_here_say_where_so_probes_run_there_too():
    from gradsync.launch import PlacesRanksHere
    from runners.local import LocalRunner
    from runners.netem import NetemRunner
    from runners.slurm import SlurmRunner
    from runners.torchrun import TorchrunRunner

    assert isinstance(LocalRunner(workers=2), PlacesRanksHere)
    assert isinstance(NetemRunner(workers=2), PlacesRanksHere)
    # Their ranks run elsewhere: gradsync simulate probes over loopback instead.
    assert not isinstance(SlurmRunner(workers=2), PlacesRanksHere)
    assert not isinstance(TorchrunRunner(workers=2), PlacesRanksHere)
    with LocalRunner(workers=2).placement(2) as placement:
        assert placement.command(1, ["python", "-V"]) == ["python", "-V"]
        assert placement.env(1) == {"MASTER_ADDR": "127.0.0.1"}
