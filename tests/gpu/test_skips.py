"""How a GPU test skips: one line saying how many GPUs it needs and how many there are (device
counts faked: the point is the machines that lack them)."""

from __future__ import annotations

import pytest

from tests.helpers import gpu


@pytest.mark.parametrize(
    ("have", "needed", "reason"),
    [
        (0, 1, "needs CUDA: torch finds no CUDA device on this machine"),
        (1, 2, "needs 2 CUDA GPUs, this machine has 1"),
        (2, 2, None),
        (8, 1, None),
    ],
)
def test_missing_gpus_says_what_is_needed(monkeypatch, have, needed, reason):
    monkeypatch.setattr(gpu, "cuda_devices", lambda: have)
    assert gpu.missing_gpus(needed) == reason
