"""Skip every ``gpu`` test this machine has too few CUDA GPUs for (checked at set-up, so
collecting them touches no GPU)."""

from __future__ import annotations

import pytest

from tests.helpers.gpu import missing_gpus


def pytest_runtest_setup(item: pytest.Item) -> None:
    counts = [mark.kwargs.get("count", 1) for mark in item.iter_markers("gpu")]
    if not counts:
        return
    reason = missing_gpus(max(counts))
    if reason is not None:
        pytest.skip(reason)
