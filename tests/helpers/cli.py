"""Running the installed ``gradsync`` command in a subprocess, as a user would."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import torch


def run_cli(
    cmd: list[str], *args: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def final_params(run_dir: Path) -> dict[str, torch.Tensor]:
    root = run_dir / "checkpoints"
    common = torch.load(
        root / (root / "latest").read_text().strip() / "common.pt",
        map_location="cpu",
        weights_only=False,
    )
    return common["model"]


TIME_PARTS = ("time/forward", "time/backward", "time/compress", "time/comm", "time/update")


def time_parts_add_up(window: dict[str, Any]) -> bool:
    """Work a scheduler does inside forward or backward hooks is counted once, under its own
    part, so the parts of an iteration never add up to more than the iteration."""
    return sum(window[k] for k in TIME_PARTS) <= window["time/iteration"] * 1.001


def run_completed(cmd: list[str], env: dict[str, str], run_dir: Path, *overrides: str) -> Path:
    """``gradsync run OVERRIDES`` into ``run_dir``, which must complete."""
    result = run_cli(cmd, "run", *overrides, f"hydra.run.dir={run_dir}", env=env)
    assert result.returncode == 0, result.stderr
    assert summary(run_dir)["status"] == "completed"
    return run_dir


def assert_same_params(
    ours: dict[str, torch.Tensor], reference: dict[str, torch.Tensor], *, atol: float = 1e-6
) -> None:
    """Equal to float32 rounding: the same training, summed in another order."""
    assert ours.keys() == reference.keys()
    for key, value in ours.items():
        torch.testing.assert_close(value, reference[key], rtol=0, atol=atol)
