"""The ideal iteration of ``benchmarks/reproduce.py deft_resnet18``: max(compute, the busiest
link's bytes ÷ its rate), from a run's own logged figures."""

from __future__ import annotations

import pytest

from benchmarks.reproduce import ideal_iteration, run_ideal
from gradsync.report.runs import Run


def test_ideal_is_the_longer_of_compute_and_wire():
    # 12.5 MB at 100 Mbit/s: 1 s on the wire, longer than 0.4 s of compute.
    wired = ideal_iteration(0.4, 12.5e6, 100.0)
    assert wired.wire == pytest.approx(1.0) and wired.iteration == pytest.approx(1.0)
    computed = ideal_iteration(0.4, 1.25e6, 100.0)  # 0.1 s on the wire
    assert computed.iteration == pytest.approx(0.4)


def test_ideal_refuses_a_link_without_a_rate():
    with pytest.raises(ValueError, match="positive"):
        ideal_iteration(0.4, 1e6, 0.0)


def test_run_ideal_reads_steady_windows_and_the_busiest_link():
    records = [
        {"step": 0, "runner/link_mbit": 100.0, "runner/probe_mbit": 93.0},
        # warm-up window: left out
        {"step": 4, "time/compute_max": 9.0, "comm/bytes_wire": 1e6, "comm/bytes_wire_max": 9e9},
        {"step": 8, "time/compute_max": 0.3, "comm/bytes_wire": 1e6, "comm/bytes_wire_max": 2e6},
        {"step": 12, "time/compute_max": 0.5, "comm/bytes_wire": 1e6, "comm/bytes_wire_max": 4e6},
    ]
    ideal = run_ideal(Run(path=None, status="completed", records=records), skip=4)
    assert ideal.compute == pytest.approx(0.4)
    assert ideal.wire_bytes == pytest.approx(3e6)  # the busiest link's, not the mean
    assert ideal.wire == pytest.approx(0.24) and ideal.iteration == pytest.approx(0.4)
