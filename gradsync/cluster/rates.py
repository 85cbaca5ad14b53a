"""Link rates as ``tc`` writes them (``100mbit``, ``1gbit``): how ``runner.bandwidth`` and
``scheduler.bandwidth`` are given, read by the config checks, the schedulers that size their
sends to the link, the cost models and the emulated network alike."""

from __future__ import annotations

import re

DEFAULT_RATE = "1gbit"
"""The link rate where a job names none: runner=netem's default, and what cost models and OSP's
budget assume for a runner that does not shape its links."""

MAX_RATE = "10000gbit"
"""The fastest link a rate may name (10 Tbit/s, beyond any network's): a larger one is a unit
mistaken."""

_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$")
_MBIT_PER_UNIT = {"bit": 1e-6, "kbit": 1e-3, "mbit": 1.0, "gbit": 1e3}
_MAX_MBIT = 1e7  # MAX_RATE


def rate_problem(rate: str, name: str) -> str | None:
    """Why ``rate`` is not a ``tc`` rate (naming the option ``name``), or None."""
    try:
        rate_mbit(rate, name=name)
    except ValueError as exc:
        return str(exc)
    return None


def rate_mbit(rate: str, *, name: str = "bandwidth") -> float:
    """Megabits per second of a ``tc`` rate such as ``100mbit`` or ``1gbit``, above 0 and at
    most ``MAX_RATE``; ``name`` is the option the error message names."""
    match = _RATE.match(rate)
    if match is None:
        raise ValueError(
            f"{name} {rate!r} is not a rate like 100mbit or 1gbit (units: bit, kbit, mbit, gbit)"
        )
    mbit = float(match.group(1)) * _MBIT_PER_UNIT[match.group(2)]
    if not 0 < mbit <= _MAX_MBIT:  # a link that carries nothing, or a unit mistaken
        raise ValueError(f"{name} {rate!r} must be above 0 and at most {MAX_RATE}")
    return mbit


def bits_per_s(rate: str, *, name: str = "bandwidth") -> float:
    """A ``tc`` rate (``100mbit``, ``1gbit``) in bits per second; ValueError names ``name``."""
    return rate_mbit(rate, name=name) * 1e6
