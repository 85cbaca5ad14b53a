"""``compressor=none``: the dense baseline; the gradient itself is the payload."""

from __future__ import annotations

from gradsync.compressors.dense import DenseCompressor


class NoneCompressor(DenseCompressor):
    lossless = True
