"""Declared checks: each option's range, choices and meaning of null, said in one line that
names the key; rules run once every option is valid on its own, the first failing one said."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from gradsync.config.checks import Options, Rule, SettingError, option, option_problems


@dataclass
class _Example(Options):
    GROUP: ClassVar[str] = "example"
    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(lambda o: o.low <= o.high, lambda o: f"example.low ({o.low}) must be <= high"),
        Rule(lambda o: o.high != 7, lambda o: "example.high must not be 7"),
    )
    fraction: float = option(0.5, above=0, at_most=1)
    count: int = option(1, at_least=1, hint="(the first)")
    limit: float | None = option(None, above=0, null_means="off")
    slowdown: float | None = option(None, at_least=1, hint="(a slowdown)")
    kind: str = option("a", choices=("a", "b"))
    links: int = option(1, choices=(1, 2))
    sizes: list[int] = option(default_factory=lambda: [1], each=True, at_least=1, min_entries=1)
    low: int = 0
    high: int = 1


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
