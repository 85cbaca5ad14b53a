"""``compressor=fp16``: IEEE half precision on the wire (half the bytes of float32).

Each worker's values are divided by the number of workers before they are summed (see
``dense.py``), so a sum overflows only where the mean gradient passes 65504, as with PyTorch's
``fp16_compress_hook``.
"""

from __future__ import annotations

import torch

from gradsync.compressors.dense import DenseCompressor


class FP16Compressor(DenseCompressor):
    wire_dtype = torch.float16
