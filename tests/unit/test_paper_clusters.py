"""A paper's own timing table predicted for its own cluster (``python -m benchmarks.papers``):
the OMGS paper's Table VI from the inputs it publishes, with the profile kept beside the
benchmark (docs/guide/papers.md)."""

from __future__ import annotations

import pytest

from benchmarks.papers import (
    MGS,
    OMGS,
    OMGS_TABLE,
    OPTIMUM,
    TOPK,
    PaperJob,
    evaluate,
    stored_measurements,
)


@pytest.fixture(scope="module")
def evaluated():
    return evaluate(PaperJob.of(OMGS_TABLE, stored_measurements(OMGS_TABLE)))


def test_one_scalar_fitted_on_topk_sgd_brings_table_vi_within_its_ranges(evaluated):
    assert evaluated.failed(OMGS_TABLE) == []
    assert evaluated.fitted.seconds[TOPK] == pytest.approx(0.666, rel=1e-6)  # the fitted cell
    assert evaluated.fitted.groups[MGS] == 53  # Table V


def test_with_nothing_fitted_communication_bound_mgs_is_within_a_tenth(evaluated):
    assert evaluated.scale > 1  # the top-k model, extrapolated, is what falls short
    assert evaluated.raw.seconds[MGS] == pytest.approx(1.217, rel=0.1)
    assert evaluated.raw.dense_comm == pytest.approx(1.92, rel=0.2)


@pytest.mark.parametrize("column", ["raw", "fitted"])
def test_the_exact_optimum_of_the_injected_costs_beats_every_plan_priced_with_them(
    evaluated, column
):
    """TopK-SGD (one group), MGS's 53 groups and the paper's rule are plans the optimum could
    have chosen: it cannot lose to them unless the planner and the timeline price groups with
    different costs."""
    seconds = getattr(evaluated, column).seconds
    optimum = seconds[OPTIMUM]
    assert optimum <= min(seconds[TOPK], seconds[MGS], seconds[OMGS]) * (1 + 1e-9)
    assert optimum < seconds[TOPK]  # merging less hides some exchange behind backward
