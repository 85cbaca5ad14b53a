"""Schema of ``compressor=powersgd``: the options of PyTorch's ``PowerSGDState`` that apply to a
scheduler's groups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from omegaconf import II

from gradsync.config.checks import require
from gradsync.config.schemas.compressors import CompressorConfig


@dataclass
class PowerSGDConfig(CompressorConfig):
    _target_: str = "gradsync.compressors.powersgd.PowerSGDCompressor"
    keeps_own_residual: ClassVar[bool] = True
    needs_its_exchange_back: ClassVar[bool] = True
    rank: int = 1
    """r: the rank of each tensor's approximation (``matrix_approximation_rank``)."""
    start_step: int = 10
    """Steps sent dense before compressing (``start_powerSGD_iter``). PyTorch's default is
    1,000, about a tenth of a long run; 10 here, so that short experiments compress."""
    min_compression_rate: float = 2.0
    """A tensor (rows × cols) is compressed only when (rows + cols)·r is this many times smaller
    than rows·cols; vectors and small tensors travel uncompressed."""
    use_error_feedback: bool = True
    """Add what the approximation left out to the next step's gradient (PowerSGD's own memory;
    ``feedback=`` stays none)."""
    warm_start: bool = True
    """Start each step's power iteration from the last step's Q; false: a new random Q."""
    orthogonalization_epsilon: float = 0.0
    """Added to each column's norm in Gram-Schmidt (> 0 guards against all-zero columns)."""
    seed: int = II("trainer.seed")
    """Seeds the random Q every worker draws alike."""

    def __post_init__(self) -> None:
        require(self.rank >= 1, f"compressor.rank must be >= 1, got {self.rank}")
        require(self.start_step >= 0, f"compressor.start_step must be >= 0, got {self.start_step}")
        require(
            self.min_compression_rate > 0,
            f"compressor.min_compression_rate must be > 0, got {self.min_compression_rate}",
        )
        require(
            self.orthogonalization_epsilon >= 0,
            "compressor.orthogonalization_epsilon must be >= 0, got "
            f"{self.orthogonalization_epsilon}",
        )


SCHEMAS: dict[str, dict[str, type]] = {"compressor": {"powersgd": PowerSGDConfig}}
