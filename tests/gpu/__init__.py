"""Tests that need CUDA GPUs: NCCL training against DDP and the flat all-reduce, overlap of
communication with backward, long runs of the schedulers whose compressors talk, mixed
precision, and the GPU benchmark's CUDA path.

On a machine with GPUs, from the repository root, one command runs them all (and only them):

    .venv/bin/python -m pytest -m gpu

Each test says how many GPUs it needs (``tests/helpers/gpu.py``) and skips, with one line
saying why, where CUDA is absent or there are fewer GPUs; the tests for two workers need two
GPUs (NCCL puts one rank on one GPU). They stay in the default selection, where without CUDA
they cost only their skips.
"""
