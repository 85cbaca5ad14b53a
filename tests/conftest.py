from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parents[1]

# Hypothesis's properties draw the same examples on every run (a red CI run is one to reproduce,
# not a draw), and keep no example database in the checkout. ``HYPOTHESIS_PROFILE=explore`` draws
# afresh, for looking for new failures by hand.
settings.register_profile("default", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a ``gpu`` test (anywhere in the suite) this machine has too few CUDA GPUs for;
    checked at set-up, so collecting it touches no GPU."""
    counts = [mark.kwargs.get("count", 1) for mark in item.iter_markers("gpu")]
    if not counts:
        return
    from tests.helpers.gpu import missing_gpus

    reason = missing_gpus(max(counts))
    if reason is not None:
        pytest.skip(reason)


def _offline_vars(home: Path) -> dict[str, str]:
    # Nothing a test starts may reach the network or the user's own wandb/HF state.
    return {
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(home / "hf"),
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(home / "wandb"),
        "WANDB_CONFIG_DIR": str(home / "wandb-config"),
    }


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """One cache directory for the session (sizes of models, ``gradsync/train/capacity.py``),
    shared by the commands the tests start and apart from the user's own."""
    mp = pytest.MonkeyPatch()
    # One for every xdist process of the run too: each model is sized (and tried on its inputs,
    # ``train/shape_check.py``) once, not once per process; writers replace the file whole.
    shared = os.environ.get("PYTEST_XDIST_WORKER") is not None
    cache = tmp_path_factory.getbasetemp().parent / "cache" if shared else None
    if cache is not None:
        cache.mkdir(exist_ok=True)
    mp.setenv("XDG_CACHE_HOME", str(cache or tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _offline_env(monkeypatch, tmp_path_factory):
    for key, value in _offline_vars(tmp_path_factory.mktemp("home")).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("GRADSYNC_FAULT", raising=False)


@pytest.fixture(scope="session")
def gradsync_cmd() -> list[str]:
    """The installed console script, as a user would type it."""
    script = Path(sys.executable).parent / "gradsync"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gradsync"]


@pytest.fixture
def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("GRADSYNC_FAULT", None)
    return env


@pytest.fixture(scope="session")
def written_run(gradsync_cmd, tmp_path_factory) -> Path:
    """A run directory the default job wrote in two steps (its metrics, summary, Hydra files and
    checkpoint), made once for the session: tests read it or damage a copy, never it."""
    from tests.helpers.cli import run_cli

    run_dir = tmp_path_factory.mktemp("written") / "run"
    env = {**os.environ, **_offline_vars(tmp_path_factory.mktemp("home"))}
    env.pop("GRADSYNC_FAULT", None)
    result = run_cli(
        gradsync_cmd, "run", "trainer.max_steps=2", f"hydra.run.dir={run_dir}", env=env
    )
    assert result.returncode == 0, result.stderr
    return run_dir


@pytest.fixture(scope="module")
def module_cli_env(tmp_path_factory) -> dict[str, str]:
    """``cli_env`` for module-scoped fixtures (one run shared by several tests)."""
    env = {**os.environ, **_offline_vars(tmp_path_factory.mktemp("home"))}
    env.pop("GRADSYNC_FAULT", None)
    return env
