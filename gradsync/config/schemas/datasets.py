"""Schema of ``dataset=digits``, the data every installation has (scikit-learn's bundled
digits)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gradsync.config.checks import Options, option
from gradsync.config.schema import TaskBound

DIGITS = 1797
"""Images in scikit-learn's bundled digits (``dataset=digits``)."""


@dataclass
class DigitsConfig(TaskBound, Options):
    GROUP: ClassVar[str] = "dataset"
    _target_: str = "gradsync.data.digits.Digits"
    test_fraction: float = option(0.2, above=0, below=1)
    """Fraction of scikit-learn's 1,797 digits held out as the test split."""
    split_seed: int = 0
    """Seed of the train/test split (fixed, so every run tests on the same images)."""

    def train_samples(self) -> int:
        return DIGITS - round(self.test_fraction * DIGITS)  # as gradsync.data.digits splits


SCHEMAS: dict[str, dict[str, type]] = {"dataset": {"digits": DigitsConfig}}
