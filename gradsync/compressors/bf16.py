"""``compressor=bf16``: bfloat16 on the wire: float32's range with 7 stored mantissa bits."""

from __future__ import annotations

import torch

from gradsync.compressors.dense import DenseCompressor


class BF16Compressor(DenseCompressor):
    wire_dtype = torch.bfloat16
