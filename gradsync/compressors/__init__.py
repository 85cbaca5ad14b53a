"""Gradient compressors: one module per ``compressor=`` option."""
