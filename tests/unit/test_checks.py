"""Declared checks: each option's range, choices and meaning of null, said in one line that
names the key; rules run once every option is valid on its own, the first failing one said.
Every number an option takes is finite and below a bound of sense (issue 51)."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from gradsync import families
from gradsync.config.checks import (
    Options,
    Rule,
    SettingError,
    declared_check,
    option,
    option_problems,
)


@dataclass
class _Example(Options):
    GROUP: ClassVar[str] = "example"
    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(lambda o: o.low <= o.high, lambda o: f"example.low ({o.low}) must be <= high"),
        Rule(lambda o: o.high != 7, lambda o: "example.high must not be 7"),
    )
    fraction: float = option(0.5, above=0, at_most=1)
    count: int = option(1, at_least=1, hint="(the first)", limit=100)
    limit: float | None = option(None, above=0, null_means="off")
    slowdown: float | None = option(None, at_least=1, hint="(a slowdown)")
    kind: str = option("a", choices=("a", "b"))
    links: int = option(1, choices=(1, 2))
    sizes: list[int] = option(default_factory=lambda: [1], each=True, at_least=1, min_entries=1)
    low: int = 0
    high: int = 1
    rate: float = 0.5
    betas: list[float] = option(default_factory=lambda: [0.5])


@pytest.mark.parametrize(
    ("settings", "line"),
    [
        ({"fraction": 0}, "example.fraction must be in (0, 1], got 0"),
        ({"fraction": 1.5}, "example.fraction must be in (0, 1], got 1.5"),
        ({"count": 0}, "example.count must be >= 1 (the first), got 0"),
        ({"limit": -1.0}, "example.limit must be > 0 or null (off), got -1.0"),
        ({"kind": "c"}, "unknown example.kind 'c'; valid: a, b"),
        ({"links": 3}, "example.links must be 1 or 2, got 3"),
        ({"sizes": [2, 0]}, "example.sizes entries must be >= 1, got [2, 0]"),
        ({"sizes": []}, "example.sizes needs at least one entry, got []"),
        ({"slowdown": 0.5}, "example.slowdown must be >= 1 (a slowdown) or null, got 0.5"),
        ({"low": 3}, "example.low (3) must be <= high"),
        ({"low": 8, "high": 7}, "example.low (8) must be <= high"),
        ({"high": 7}, "example.high must not be 7"),
        # Past the bound of sense: the range with it; below the lower bound, as before.
        ({"count": 101}, "example.count must be in [1, 100] (the first), got 101"),
        ({"count": 10**30}, f"example.count must be in [1, 100] (the first), got {10**30}"),
        # Not finite: refused whatever the bounds (nan passes no comparison, inf a lower bound).
        ({"fraction": math.nan}, "example.fraction must be a finite number in (0, 1], got nan"),
        ({"limit": math.inf}, "example.limit must be a finite number > 0 or null (off), got inf"),
        ({"rate": math.nan}, "example.rate must be a finite number, got nan"),
        ({"rate": -math.inf}, "example.rate must be a finite number, got -inf"),
        (
            {"betas": [0.5, math.nan]},
            "example.betas entries must be finite numbers, got [0.5, nan]",
        ),
        ({"sizes": [[1]]}, "example.sizes must be a list of single values, got [[1]]"),
        ({"sizes": ["2"]}, "example.sizes entries must be >= 1, got ['2']"),
    ],
)
def test_a_bad_setting_is_one_line_that_names_its_key(settings: dict, line: str) -> None:
    with pytest.raises(SettingError) as raised:
        _Example(**settings)
    assert str(raised.value) == line


def test_defaults_and_null_pass() -> None:
    assert option_problems(_Example()) == []
    assert option_problems(_Example(limit=None, fraction=1, count=5)) == []


def test_every_field_problem_is_listed_before_any_rule() -> None:
    example = _Example.__new__(_Example)
    example.__dict__.update(vars(_Example()), fraction=0, count=0, low=5)
    assert option_problems(example) == [
        "example.fraction must be in (0, 1], got 0",
        "example.count must be >= 1 (the first), got 0",
    ]


def _options_classes() -> list[type]:
    """Every group's options classes, from the registries, and the sections nested in them
    (``logger.wandb``)."""
    found = {cls for options in families.option_classes().values() for cls in options.values()}
    todo = list(found)
    while todo:
        hints = typing.get_type_hints(todo.pop())
        for hint in hints.values():
            nested = [
                arg for arg in (hint, *typing.get_args(hint)) if dataclasses.is_dataclass(arg)
            ]
            todo += [cls for cls in nested if cls not in found]
            found.update(nested)
    return sorted((cls for cls in found if issubclass(cls, Options)), key=lambda c: c.__name__)


def _number_type(hint: Any) -> tuple[type | None, bool]:
    """The number type of a field's annotation (int, float or None) and whether it is a list."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    listed = typing.get_origin(hint) is list
    element = typing.get_args(hint)[0] if listed else hint
    return (element if element in (int, float) else None), listed


def _numeric_fields() -> list[tuple[str, dataclasses.Field[Any], type, bool]]:
    fields = []
    for cls in _options_classes():
        hints = typing.get_type_hints(cls)
        for spec in dataclasses.fields(cls):
            number, listed = _number_type(hints[spec.name])
            if number is not None:
                fields.append((f"{cls.GROUP}.{spec.name}", spec, number, listed))
    return fields


def test_every_number_of_every_option_is_finite_and_bounded() -> None:
    """nan, inf and 10**30 (1e308 too for a float) reach no worker through any option: each is
    refused in one line that names the key."""
    fields = _numeric_fields()
    assert len(fields) > 100  # every family's options were found
    accepted = []
    for key, spec, number, listed in fields:
        values: list[Any] = [10**30]
        if number is float:
            values += [math.nan, math.inf, -math.inf, 1e308]
        for value in values:
            problem = declared_check(spec).failure(key, [value] if listed else value)
            if problem is None:
                accepted.append(f"{key}={value}")
            else:
                assert key in problem and "\n" not in problem, problem
    assert accepted == [], "give these options a bound (option(..., limit=...))"
