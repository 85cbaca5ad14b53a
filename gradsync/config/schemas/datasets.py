"""Schema of ``dataset=digits``, the data every installation has (scikit-learn's bundled
digits)."""

from __future__ import annotations

from dataclasses import dataclass

from gradsync.config.checks import require
from gradsync.config.schema import TaskBound

DIGITS = 1797
"""Images in scikit-learn's bundled digits (``dataset=digits``)."""


@dataclass
class DigitsConfig(TaskBound):
    _target_: str = "gradsync.data.digits.Digits"
    test_fraction: float = 0.2
    """Fraction of scikit-learn's 1,797 digits held out as the test split."""
    split_seed: int = 0
    """Seed of the train/test split (fixed, so every run tests on the same images)."""

    def __post_init__(self) -> None:
        require(
            0 < self.test_fraction < 1,
            f"dataset.test_fraction must be in (0, 1), got {self.test_fraction}",
        )

    def train_samples(self) -> int:
        return DIGITS - round(self.test_fraction * DIGITS)  # as gradsync.data.digits splits


SCHEMAS: dict[str, dict[str, type]] = {"dataset": {"digits": DigitsConfig}}
