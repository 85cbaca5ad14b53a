"""One job with other compressor and scheduler choices (``gradsync simulate``'s pairs): the
options the job sets go to the choices that have them, the dense baseline always composes, and
an option nobody has is one line."""

from __future__ import annotations

import pytest

from gradsync.cli.simulate import combinations
from gradsync.jobs.alternatives import Alternative, compose_alternatives
from gradsync.jobs.compose import ConfigError

DENSE = Alternative("none", "wfbp")


def _by_pair(overrides: list[str], wanted: list[Alternative]) -> dict[tuple[str, str], object]:
    return {
        (c.alternative.compressor, c.alternative.scheduler): c
        for c in compose_alternatives(overrides, wanted)
    }


def test_a_compressor_option_goes_to_those_that_have_it_and_the_baseline_composes():
    wanted = [DENSE, Alternative("topk", "allreduce"), Alternative("terngrad", "allreduce")]
    composed = _by_pair(["compressor.density=0.001"], wanted)
    dense, topk, terngrad = (composed[(a.compressor, a.scheduler)] for a in wanted)
    assert dense.problem is None and "density" not in dense.cfg.compressor
    assert topk.problem is None and topk.cfg.compressor.density == 0.001
    assert terngrad.problem is None and "density" not in terngrad.cfg.compressor


def test_an_experiments_options_carry_over_and_the_command_line_wins():
    job = ["experiment=omgs_resnet50_imagenet", "dataset=synthetic"]
    wanted = [DENSE, Alternative("topk", "allreduce"), Alternative("deft", "omgs")]
    composed = _by_pair(job, wanted)
    assert composed[("none", "wfbp")].problem is None
    topk = composed[("topk", "allreduce")].cfg
    assert (topk.compressor.density, topk.compressor.exchange) == (0.001, "allgather")
    deft = composed[("deft", "omgs")].cfg
    assert deft.compressor.density == 0.001 and deft.scheduler.rule == "paper"
    assert deft.trainer.batch_size == 16  # the rest of the job is the experiment's
    again = _by_pair([*job, "compressor.density=0.01"], wanted)
    assert again[("topk", "allreduce")].cfg.compressor.density == 0.01


def test_a_pair_the_job_refuses_says_why():
    composed = _by_pair(["compressor.exchange=allgather"], [DENSE, Alternative("topk", "wfbp")])
    problem = composed[("topk", "wfbp")].problem
    assert isinstance(problem, ConfigError) and "all-gathers its payloads" in str(problem)


def test_an_option_no_choice_has_is_one_line():
    with pytest.raises(ConfigError, match="no compressor of this comparison") as error:
        compose_alternatives(["compressor.densty=0.1"], [DENSE, Alternative("topk", "wfbp")])
    assert "'densty'" in str(error.value) and "\n" not in str(error.value)


def test_a_scheduler_option_the_command_sets_replaces_its_variants_rows():
    _, rows, _ = combinations(["scheduler.rule=code"], ["topk"], ["omgs"])
    assert [row.name for row in rows] == ["topk × omgs scheduler.rule=code"]
    assert rows[0].cfg.scheduler.rule == "code"
    _, rows, _ = combinations([], ["topk"], ["omgs"])
    assert [row.cfg.scheduler.rule for row in rows] == ["paper", "optimal"]


def test_an_option_given_several_values_makes_a_row_of_each_where_it_applies():
    _, rows, _ = combinations(["compressor.density=0.001,0.01"], ["none", "topk"], ["allreduce"])
    assert {row.name: row.cfg.compressor.get("density") for row in rows} == {
        "none × allreduce": None,  # one row: dense has no density to sweep
        "topk × allreduce compressor.density=0.001": 0.001,
        "topk × allreduce compressor.density=0.01": 0.01,
    }
    _, rows, _ = combinations(["scheduler.rule=paper,code"], ["topk"], ["omgs"])
    assert [row.name for row in rows] == [
        "topk × omgs scheduler.rule=paper",
        "topk × omgs scheduler.rule=code",
    ]
    with pytest.raises(ConfigError, match="has an option 'densty'"):
        combinations(["compressor.densty=0.1,0.2"], ["topk"], ["allreduce"])
