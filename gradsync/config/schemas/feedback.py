"""Schemas of ``feedback=auto``, ``none`` and ``residual``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


# Each option is a policy: built with the run's compressor, it returns the memory to keep.
class FeedbackConfig:
    """Base of every feedback option's schema."""

    always_keeps_residual: ClassVar[bool] = False
    """Keeps a residual whatever the compressor declares (lossless ones aside)."""


@dataclass
class AutoFeedbackConfig(FeedbackConfig):
    _target_: str = "gradsync.feedback.auto.for_compressor"


@dataclass
class NoneFeedbackConfig(FeedbackConfig):
    _target_: str = "gradsync.feedback.none.for_compressor"


@dataclass
class ResidualFeedbackConfig(FeedbackConfig):
    _target_: str = "gradsync.feedback.residual.for_compressor"
    always_keeps_residual: ClassVar[bool] = True


SCHEMAS: dict[str, dict[str, type]] = {
    "feedback": {
        "auto": AutoFeedbackConfig,
        "none": NoneFeedbackConfig,
        "residual": ResidualFeedbackConfig,
    }
}
