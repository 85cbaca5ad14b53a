"""``feedback=auto`` (the default): error feedback exactly where the method as published uses it.

Sparsifiers and EF-signSGD keep a residual; TernGrad, QSGD and fp16/bf16 are unbiased or
near-exact and run without one. ``feedback=residual`` or ``feedback=none`` force either way
(for ablations such as TernGrad with error feedback).
"""

from __future__ import annotations

from gradsync.feedback import none, residual
from gradsync.types import Compressor, ErrorFeedback


def for_compressor(compressor: Compressor) -> ErrorFeedback:
    make = residual.for_compressor if compressor.error_feedback else none.for_compressor
    return make(compressor)
