"""Tests that need CUDA GPUs: training against DDP and the flat all-reduce (NCCL, and gloo with
workers sharing a GPU), collective order on a shared GPU, overlap of communication with
backward (also behind runner=netem), long runs of the schedulers whose compressors talk, mixed
precision, and the GPU benchmark's CUDA path.

On a machine with GPUs, from the repository root, one command runs them all (and only them):

    .venv/bin/python -m pytest -m gpu

Each test says how many GPUs it needs (``tests/helpers/gpu.py``) and skips, with one line
saying why, where CUDA is absent or there are fewer GPUs. Multi-worker cases run one worker per
GPU (NCCL: two GPUs for two workers) and also 2 and 4 workers sharing one GPU (gloo), so a
machine with one GPU runs those too; ``-k "2on1gpu or 4on1gpu or shared_gpu or netem or
gloo_gpu"`` selects just the shared-GPU cases. They stay in the default selection, where
without CUDA they cost only their skips.
"""
