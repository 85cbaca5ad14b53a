"""What a job's settings must satisfy, declared on the options, and the error that says which to
change. A leaf: nothing of gradsync is imported here, so every family's options, the command
line and the workers all use it.

An option is a dataclass field made with ``option(default, ...)``: its range, the largest
value that is not a mistake (``limit``), choices, what null means and a hint are declared with
it, and ``Options.__post_init__`` checks them when the composed config becomes objects
(``OmegaConf.to_object``), in the launching process, before any output is written. Every float,
an option's or a plain field's, must be finite. What relates two options is a ``Rule`` the
class declares in ``RULES``.

``SettingError`` is a job's settings failing where they are used, said in one line that names
the setting to change: the command line refuses such a job before it starts (exit 2), and a
worker that meets one anyway (what only it can know) reports that line alone, without a
traceback, as its rank's failure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar


class SettingError(ValueError):
    """A setting the job cannot run with; ``str()`` is the one line that says what to set."""


# Bounds of sense (``Check.limit``): past them a value is a typo or a unit mistake, never a
# setting, and it would fail far from where it was given (an overflow deep in torch, a job
# that waits forever), so each option refuses it where it enters.
MAX_WORKERS = 2**16
"""Ranks of one job, every node's together (also its nodes and parameter servers)."""
MAX_CORES = 2**10
"""Threads or loader processes of one worker (or cores of one task)."""
MAX_EPOCHS = 10**6
"""Epochs of a run, or epochs between two events of one."""
MAX_STEPS = 10**9
"""Optimizer steps of a run, or a step's number."""
MAX_PROFILE_STEPS = 10**4
"""Steps a method measures before it plans."""
MAX_BATCH = 10**7
"""Samples of one batch."""
MAX_SAMPLES = 10**8
"""Samples of a generated split: every epoch each worker draws a permutation of them (8 bytes
a sample)."""
MAX_WIDTH = 2**16
"""A layer's width: hidden units, channels, an embedding."""
MAX_TOKENS = 2**20
"""Tokens of one sequence."""
MAX_VOCAB = 10**7
"""Words of a vocabulary, or classes of a classifier."""
MAX_LAYERS = 2**10
"""Layers (or attention heads) of one model."""
MAX_ELEMENTS = 10**12
"""Elements of a bucket, partition or group of the gradient."""
MAX_SECONDS = 7 * 24 * 3600
"""A timeout or a grace period: a week."""
MAX_SEED = 2**32 - 1
"""The largest seed every consumer takes: NumPy's ``RandomState`` (PowerSGD's draws,
scikit-learn's split) takes [0, 2**32), and the data order's ``seed * 100_003 + epoch`` stays
within what ``torch.manual_seed`` takes."""


@dataclass(frozen=True)
class Check:
    """What one option's value must be (None, where the option's type allows it, always
    passes). Each bound is inclusive (``at_least``, ``at_most``) or exclusive (``above``,
    ``below``); ``each`` applies them to every entry of a list. A float (or a list's entry)
    must be finite, whatever the bounds: nan passes no comparison, and inf passes a lower
    bound."""

    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    below: float | None = None
    choices: tuple[Any, ...] = ()
    each: bool = False
    min_entries: int | None = None
    nullable: bool = False
    """Null is allowed (said as "or null" in the message)."""
    null_means: str = ""
    """What null does, said after it: "or null (off)"."""
    hint: str = ""
    """What a boundary value means, said after the range: "(0: off)"."""
    problem: Callable[[Any], str | None] | None = None
    """Anything else the value must be: the reason it is not (one line), or None."""
    json_fields: tuple[str, ...] = ()
    """The keys a JSON file the option names must hold; ``json_what`` says what the file is."""
    json_what: str = ""
    limit: float | None = None
    """The largest value that is not a mistake (``MAX_WORKERS``...): a bound of sense, not of
    meaning, so the range says it only to a value past it or not finite."""

    def failure(self, key: str, value: Any) -> str | None:
        """Why ``value`` of the option ``key`` is not allowed, or None."""
        if value is None:
            return None
        if isinstance(value, (list, tuple)) and any(isinstance(v, (list, dict)) for v in value):
            # No option is a list of lists, but OmegaConf lets [[1]] into a list of ints.
            return f"{key} must be a list of single values, got {_given(value)}"
        if self.min_entries is not None and len(value) < self.min_entries:
            entries = "one entry" if self.min_entries == 1 else f"{self.min_entries} entries"
            return f"{key} needs at least {entries}, got {_given(value)}"
        values = list(value) if self.each else [value]
        if self.choices and any(v not in self.choices for v in values):
            if all(isinstance(c, str) for c in self.choices):
                return f"unknown {key} '{value}'; valid: {', '.join(self.choices)}"
            return f"{key} must be {_either(self.choices)}, got {_given(value)}"
        if _not_finite(value):
            what = f"{key} entries" if isinstance(value, (list, tuple)) else key
            numbers = "finite numbers" if isinstance(value, (list, tuple)) else "a finite number"
            bounds = self._range(limited=True)
            return self._refusal(what, f"{numbers} {bounds}".rstrip(), value)
        what = f"{key} entries" if self.each else key
        if not all(self._in_range(v) for v in values):
            return self._refusal(what, self._range(), value)
        if self.limit is not None and any(v > self.limit for v in values):
            return self._refusal(what, self._range(limited=True), value)
        if self.problem is not None:
            problem = self.problem(value)
            if problem is not None:
                return problem
        if self.json_fields:
            return json_object_problem(value, key, self.json_fields, self.json_what)
        return None

    def _in_range(self, value: Any) -> bool:
        if not self._range(limited=True):
            return True  # no bounds: any value of the field's type
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return False  # not a number, whatever the field's type says
        return (
            (self.at_least is None or value >= self.at_least)
            and (self.above is None or value > self.above)
            and (self.at_most is None or value <= self.at_most)
            and (self.below is None or value < self.below)
        )

    def _refusal(self, what: str, allowed: str, value: Any) -> str:
        """``what`` must be ``allowed``, with the hint and what null means, and the value."""
        hint = f" {self.hint}" if self.hint else ""
        null = " or null" if self.nullable else ""
        null += f" ({self.null_means})" if self.nullable and self.null_means else ""
        return f"{what} must be {allowed}{hint}{null}, got {_given(value)}"

    def _range(self, *, limited: bool = False) -> str:
        """The bounds as one reads them ("in (0, 1]", ">= 1"; "" for none); ``limited``: with
        ``limit`` as the upper bound where no other is declared."""
        low, low_open = (self.above, True) if self.above is not None else (self.at_least, False)
        high, high_open = (self.below, True) if self.below is not None else (self.at_most, False)
        if limited and high is None:
            high, high_open = self.limit, False
        if low is None and high is None:
            return ""
        if low is not None and high is not None:
            opening, closing = "(" if low_open else "[", ")" if high_open else "]"
            return f"in {opening}{_shown(low)}, {_shown(high)}{closing}"
        if low is not None:
            return f"{'>' if low_open else '>='} {_shown(low)}"
        return f"{'<' if high_open else '<='} {_shown(high)}"


def option(default: Any = MISSING, *, default_factory: Any = MISSING, **check: Any) -> Any:
    """A field with ``default`` (or ``default_factory``) whose value must pass
    ``Check(**check)``; a default of None makes null allowed."""
    declared = Check(nullable=check.pop("nullable", default is None), **check)
    return field(default=default, default_factory=default_factory, metadata={"check": declared})


def seed_option(default: Any, *, hint: str = "") -> Any:
    """A seed (``default``: an int, or the job's seed interpolated), in what every consumer of
    one takes (``MAX_SEED``)."""
    return option(default, at_least=0, at_most=MAX_SEED, hint=hint)


_ANY_FINITE = Check()
"""The check of a field declared without ``option()``: any value of its type, a float finite."""


def declared_check(spec: Field[Any]) -> Check:
    """What the field ``spec`` declares its value must be (``option()``), else ``_ANY_FINITE``."""
    check: Check = spec.metadata.get("check", _ANY_FINITE)
    return check


def _unresolved(value: Any, default: Any) -> bool:
    """``value`` is the field's default interpolation (``${trainer.seed}``), not resolved."""
    return isinstance(value, str) and value == default and value.startswith("${")


@dataclass(frozen=True)
class Rule:
    """What two or more options of one class must satisfy together: ``holds(options)``, else
    the one line ``says(options)``."""

    holds: Callable[[Any], bool]
    says: Callable[[Any], str]


class Options:
    """Base of every options class (a dataclass): ``GROUP`` is the config key its options sit
    under (``compressor``, ``trainer``, ``logger.wandb``); the fields' declared checks, then
    the class's ``RULES``, run when it is built."""

    GROUP: ClassVar[str] = ""
    RULES: ClassVar[tuple[Rule, ...]] = ()

    def __post_init__(self) -> None:
        for problem in option_problems(self):
            raise SettingError(problem)


def option_problems(options: Any) -> list[str]:
    """Every declared check ``options`` fails, in field order; when none does, its first
    failing rule."""
    group = getattr(options, "GROUP", "")
    problems = []
    for spec in fields(options):
        value = getattr(options, spec.name)
        if _unresolved(value, spec.default):
            continue  # an object built outside a config (a test's): checked once resolved
        key = f"{group}.{spec.name}" if group else spec.name
        problem = declared_check(spec).failure(key, value)
        if problem is not None:
            problems.append(problem)
    if problems:  # rules assume each option is valid on its own
        return problems
    for rule in getattr(options, "RULES", ()):  # and each rule, that the ones before it hold
        if not rule.holds(options):
            return [rule.says(options)]
    return []


def json_object_problem(path: str, key: str, fields: Sequence[str], what: str) -> str | None:
    """Why the file ``key`` names is not a JSON object with ``fields`` (``what``: what the file
    should be, for the message); None when it is."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (FileNotFoundError, IsADirectoryError):
        return f"{key}: no file {path!r} ({what})"
    except OSError as exc:
        return f"{key}: cannot read {path} ({exc.strerror}); give {what}"
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"{key}: {path} is not JSON ({exc}); give {what}"
    missing = [name for name in fields if not isinstance(data, dict) or name not in data]
    if missing:
        return f"{key}: {path} has no {', '.join(missing)}; give {what}"
    return None


def too_few_samples(num_samples: int, *, batch_size: int, workers: int) -> str | None:
    """Why a training set of ``num_samples`` cannot give every one of ``workers`` workers one
    batch of ``batch_size`` a step, or None."""
    global_batch = batch_size * workers
    if num_samples >= global_batch:
        return None
    return (
        f"the training set has {num_samples} samples, fewer than one global batch of "
        f"{global_batch} (trainer.batch_size × trainer.workers): lower either"
    )


def _not_finite(value: Any) -> bool:
    """A float, or an entry of a list, that is nan or infinite."""
    if isinstance(value, (list, tuple)):
        return any(_not_finite(entry) for entry in value)
    return isinstance(value, float) and not math.isfinite(value)


def _given(value: Any) -> str:
    """A setting's value as the job has it (2.0 for a float field given 2)."""
    return str(list(value)) if isinstance(value, (list, tuple)) else str(value)


def _shown(value: Any) -> str:
    """A bound as one writes it: 1 rather than 1.0."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(_shown(v) for v in value)}]"
    return str(value)


def _either(choices: Sequence[Any]) -> str:
    shown = [_shown(c) for c in choices]
    if len(shown) <= 2:
        return " or ".join(shown)
    return f"one of {', '.join(shown)}"
