"""Any value of any option, generated: composing the job refuses it with ConfigError's one line,
or gives a config whose every number is finite and fits in 64 bits. Never another exception,
never nan or 10**30 handed to a worker (issue 51)."""

from __future__ import annotations

from functools import cache
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from gradsync.jobs.compose import ConfigError, compose_jobs
from gradsync.jobs.reference import all_option_docs


@cache
def options() -> dict[str, dict[str, tuple[str, ...]]]:
    """``{group: {option: keys}}``: every key of every option of every group, as the command
    line sets it (``compressor.density``), as the configuration reference lists them (nested
    sections and derived keys included); composed once, the first time a job is drawn."""
    found = {
        group: {doc.option: tuple(key.key for key in doc.keys) for doc in docs if doc.keys}
        for group, docs in all_option_docs().items()
    }
    return {group: keyed for group, keyed in found.items() if keyed}  # recipes have no keys


EDGES = (
    *("0", "-1", "1", "2", "1e11", str(2**31), str(2**32), str(2**63), str(2**64)),
    *(str(10**12), str(10**30), str(-(10**30)), str(10**400)),
    *("nan", "inf", "-inf", "+inf", "1e308", "-1e308", "1e400", "-0.0", "5e-324", "0.5"),
)
"""Numbers a typo or a mistaken unit gives: zero, negatives, the edges of 32 and 64 bits, huge
integers, special and extreme floats."""
OTHERS = ("true", "false", "null", "''", "abc", "'abc'", "[]", "{}", "{a: 1}", "[[1]]")

NUMBERS = st.one_of(
    st.sampled_from(EDGES),
    st.integers().map(str),
    st.floats().map(repr),  # nan, inf, -0.0, subnormals, 1e+308 as Python writes them
)
WORDS = st.text(alphabet="abcxyz0123456789 _-.²٣é", max_size=8).map(lambda word: f"'{word}'")
ANYTHING = st.one_of(
    st.sampled_from(OTHERS), st.booleans().map(lambda b: str(b).lower()), WORDS, NUMBERS
)
VALUES = st.one_of(  # numbers most often: most keys take them, and a mistyped value stops early
    NUMBERS,
    NUMBERS,
    st.lists(NUMBERS, max_size=4).map(lambda items: f"[{','.join(items)}]"),
    ANYTHING,
    st.lists(ANYTHING, max_size=3).map(lambda items: f"[{','.join(items)}]"),
)


@st.composite
def jobs(draw: st.DrawFn) -> list[str]:
    """One job's overrides: up to three groups, each with an option chosen and up to three of
    its keys given generated values (several keys a composition, to try more in the time)."""
    groups = draw(st.lists(st.sampled_from(sorted(options())), min_size=1, max_size=3, unique=True))
    overrides = []
    for group in groups:
        option = draw(st.sampled_from(sorted(options()[group])))
        keys = draw(st.lists(st.sampled_from(options()[group][option]), min_size=1, max_size=3))
        overrides += [f"{group}={option}", *(f"{key}={draw(VALUES)}" for key in keys)]
    return overrides


def numbers(node: Any) -> list[int | float]:
    """Every number in a resolved config (booleans aside)."""
    if isinstance(node, dict):
        return [n for value in node.values() for n in numbers(value)]
    if isinstance(node, list):
        return [n for value in node for n in numbers(value)]
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        return [node]
    return []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=st.deferred(jobs))
def test_any_value_of_any_option_is_a_job_or_one_line(job: list[str]) -> None:
    try:
        (cfg,) = compose_jobs(job, multirun=False, launcher_here=False, machine=False)
    except ConfigError as refused:
        text = str(refused)
        assert text and "\n" not in text, f"{job}: {text!r}"
        return
    resolved = OmegaConf.to_container(cfg, resolve=True)
    for number in numbers(resolved):
        assert abs(number) < 2**63, f"{job} gives {number}"  # nan and inf fail it too
