"""Benchmarks: run from the repository root as ``python -m benchmarks.<name>``."""
