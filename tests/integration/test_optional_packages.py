"""``pytest -m gpu`` collects on a machine without ``datasets``, ``scipy`` and ``wandb`` (which
``make install`` installs, but a GPU machine with torch alone may have none of them): no test
module, helper or conftest imports them, directly or through gradsync, when it is imported; a
test that needs one skips."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OPTIONAL = ("datasets", "scipy", "wandb")
COLLECT = ("-m", "pytest", "-m", "gpu", "--collect-only", "-q", "-o", "addopts=")


def _without_optional(folder: Path) -> dict[str, str]:
    """This process's environment, but for a folder first on PYTHONPATH whose module of each
    optional package fails to import as a missing package does (nothing is uninstalled)."""
    for name in OPTIONAL:
        missing = f'raise ModuleNotFoundError("No module named {name!r}", name={name!r})\n'
        (folder / f"{name}.py").write_text(missing)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not ours
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
    return env


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_gpu_tests_collect_without_the_optional_packages(tmp_path):
    env = _without_optional(tmp_path)
    for name in (*OPTIONAL, "scipy.stats"):  # the stand-ins work
        assert _run(["-c", f"import {name}"], env).returncode != 0, name
    result = _run([*COLLECT, "-p", "no:cacheprovider"], env)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert re.search(r"^[1-9]\d*/\d+ tests collected", result.stdout, re.MULTILINE), result.stdout
