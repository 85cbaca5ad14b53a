from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _offline_env(monkeypatch, tmp_path_factory):
    # Nothing a test starts may reach the network or the user's own wandb/HF state.
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(home / "hf"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(home / "wandb"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(home / "wandb-config"))
    monkeypatch.delenv("GRADSYNC_FAULT", raising=False)


@pytest.fixture
def gradsync_cmd() -> list[str]:
    """The installed console script, as a user would type it."""
    script = Path(sys.executable).parent / "gradsync"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gradsync.cli"]


@pytest.fixture
def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("GRADSYNC_FAULT", None)
    return env
