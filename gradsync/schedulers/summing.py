"""What an engine that sums payloads on the wire (all-reduce) asks of its compressor, for an
engine built directly rather than from a checked config (where ``registry.allreducible_problem``
refuses the pair first)."""

from __future__ import annotations

from gradsync.compressors.registry import allreducible_choices
from gradsync.types import Compressor


def require_allreducible(scheduler: str, sums: str, compressor: Compressor) -> None:
    """ValueError unless ``compressor``'s payloads add up, naming what ``scheduler`` sums
    (``sums``)."""
    if not compressor.allreducible:
        raise ValueError(
            f"scheduler={scheduler} all-reduces {sums}, so it needs a compressor whose payloads "
            f"add up: {allreducible_choices()}"
        )
