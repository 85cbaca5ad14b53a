"""Every error feedback's options (``feedback=``) and the registry of them. Torch-free."""

from __future__ import annotations

from collections.abc import Mapping
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


FEEDBACK: Mapping[str, type[FeedbackConfig]] = {
    "auto": AutoFeedbackConfig,
    "none": NoneFeedbackConfig,
    "residual": ResidualFeedbackConfig,
}
"""Every ``feedback=`` option; its YAML file in ``conf/feedback/`` starts from it."""
