"""``compressor=fp16``: IEEE half precision on the wire (half the bytes of float32).

Half precision overflows above 65504; gradients that large mean the run is diverging anyway.
"""

from __future__ import annotations

import torch

from gradsync.compressors.dense import DenseCompressor


class FP16Compressor(DenseCompressor):
    wire_dtype = torch.float16
