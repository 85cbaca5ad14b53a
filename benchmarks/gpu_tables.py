"""What the tables of ``benchmarks.gpu`` share: a goal a ratio meets or not, and Markdown."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass

NOT_MEASURED = "—"


@dataclass(frozen=True)
class Goal:
    """A bound a measured ratio should reach: at least ``bound`` (a speed against a limit), or
    at most ``bound`` with ``at_most`` (a time against a limit)."""

    bound: float
    at_most: bool = False
    percent: bool = False
    """Shown as a percentage (a share of a whole)."""

    def met(self, ratio: float) -> bool:
        return ratio <= self.bound if self.at_most else ratio >= self.bound

    def shown(self, ratio: float | None) -> str:
        """``ratio`` as this goal is written."""
        return percent(ratio) if self.percent else number(ratio)

    def __str__(self) -> str:
        bound = f"{self.bound * 100:g}%" if self.percent else f"{self.bound:g}"
        return f"{'≤' if self.at_most else '≥'} {bound}"


GOAL_HEADER = ("goal", "met")


def goal_cells(goal: Goal | None, ratio: float | None) -> list[str]:
    """``ratio``, the goal and whether ``ratio`` meets it, as three cells (a dash where there
    is none)."""
    if goal is None:
        return [number(ratio), NOT_MEASURED, NOT_MEASURED]
    met = NOT_MEASURED if ratio is None else "met" if goal.met(ratio) else "not met"
    return [goal.shown(ratio), str(goal), met]


def number(value: float | None, digits: int = 2) -> str:
    return NOT_MEASURED if value is None else f"{value:,.{digits}f}"


def percent(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:.1%}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int) -> str:
    """A Markdown table; its first ``text_columns`` columns left-aligned, the rest (numbers)
    right-aligned."""
    align = ["---"] * text_columns + ["---:"] * (len(header) - text_columns)
    lines = [header, align, *rows]
    return "\n".join(f"| {' | '.join(cells)} |" for cells in lines)


def one_line(error: BaseException) -> str:
    """What went wrong, for a table cell: the error's last line (a failed command's error
    comes last in what it printed)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1] if lines else ''}".replace("|", "/")


def reported(error: BaseException) -> str:
    """``one_line(error)`` for a table cell, once its whole traceback is printed on stderr
    (which the command's log keeps)."""
    traceback.print_exception(error, file=sys.stderr)
    return one_line(error)
