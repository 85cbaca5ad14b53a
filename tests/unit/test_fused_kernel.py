"""``FusedKernel``: the compiled kernel on the GPU's route, its reference on a CPU, and the
reference again once Dynamo will compile no more kinds of input for it."""

from __future__ import annotations

import torch
import torch._dynamo.config

from gradsync.compressors.code_paths import gpu_branches
from gradsync.compressors.fused import fused


def test_past_the_recompile_limit_a_fused_kernel_runs_its_reference(monkeypatch):
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 1)

    @fused
    def affine(x: torch.Tensor) -> torch.Tensor:
        return x * 3 + 1

    with gpu_branches():
        for dtype in (torch.float32, torch.float64, torch.int32):  # a compile each
            x = torch.arange(5, dtype=dtype)
            assert torch.equal(affine(x), x * 3 + 1)


def test_on_the_cpu_route_a_fused_kernel_is_its_reference():
    @fused
    def affine(x: torch.Tensor) -> torch.Tensor:
        return x * 3 + 1

    affine(torch.ones(3))
    assert affine.kernels == 0  # nothing was compiled
