"""Schema of ``compressor=powersgd``: the options of PyTorch's ``PowerSGDState`` that apply to a
scheduler's groups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gradsync.compressors.options.base import CompressorConfig, job_seed_option
from gradsync.config.checks import MAX_STEPS, MAX_WIDTH, option

MAX_COMPRESSION_RATE = 1e6
"""No tensor's rows·cols/(rows + cols) comes near it: a larger rate compresses nothing."""


@dataclass
class PowerSGDConfig(CompressorConfig):
    """PowerSGD (Vogels et al. 2019) as PyTorch's powerSGD_hook runs it: every matrix-shaped
    tensor (convolution kernels flattened to rows x cols) sent as rank-r factors P and Q,
    all-reduced in two rounds, with its own error feedback and a warm-started Q; vectors and
    small tensors sent as they are; dense for the first start_step steps. Works with the
    all-reducing schedulers."""

    _target_: str = "gradsync.compressors.powersgd.PowerSGDCompressor"
    keeps_own_residual: ClassVar[bool] = True
    payloads_add_up: ClassVar[bool] = True  # P and Q are sums of every worker's
    needs_its_exchange_back: ClassVar[bool] = True
    rank: int = option(1, at_least=1, limit=MAX_WIDTH)
    """r: the rank of each tensor's approximation (``matrix_approximation_rank``)."""
    start_step: int = option(10, at_least=0, limit=MAX_STEPS)
    """Steps sent dense before compressing (``start_powerSGD_iter``). PyTorch's default is
    1,000, about a tenth of a long run; 10 here, so that short experiments compress."""
    min_compression_rate: float = option(2.0, above=0, limit=MAX_COMPRESSION_RATE)
    """A tensor (rows × cols) is compressed only when (rows + cols)·r is this many times smaller
    than rows·cols; vectors and small tensors travel uncompressed."""
    use_error_feedback: bool = True
    """Add what the approximation left out to the next step's gradient (PowerSGD's own memory;
    ``feedback=`` stays none)."""
    warm_start: bool = True
    """Start each step's power iteration from the last step's Q; false: a new random Q."""
    orthogonalization_epsilon: float = option(0.0, at_least=0, limit=1)
    """Added to each column's norm in Gram-Schmidt (> 0 guards against all-zero columns)."""
    seed: int = job_seed_option()
    """Seeds the random Q every worker draws alike."""
