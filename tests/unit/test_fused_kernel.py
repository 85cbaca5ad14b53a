"""``FusedKernel``: the compiled kernel on the GPU's route, its reference on a CPU, and the
reference again once Dynamo will compile no more kinds of input for it."""

from __future__ import annotations

import torch
import torch._dynamo.config

from gradsync.compressors.code_paths import gpu_branches
from gradsync.compressors.fused import fused, observe_fused


def test_past_the_recompile_limit_a_fused_kernel_runs_its_reference_for_new_kinds_only():
    @fused
    def affine(x: torch.Tensor) -> torch.Tensor:
        return x * 3 + 1

    compiled: list[str] = []
    with (
        torch._dynamo.config.patch(recompile_limit=1),
        gpu_branches(),
        observe_fused(lambda name, kernels: compiled.append(name)),
    ):
        for dtype in (torch.float32, torch.float64, torch.int32, torch.float32):
            x = torch.arange(5, dtype=dtype)
            assert torch.equal(affine(x), x * 3 + 1)
    assert compiled == ["affine", "affine"]  # float32 twice; the others past the limit


def test_on_the_cpu_route_a_fused_kernel_is_its_reference():
    @fused
    def affine(x: torch.Tensor) -> torch.Tensor:
        return x * 3 + 1

    affine(torch.ones(3))
    assert affine.kernels == 0  # nothing was compiled


def test_a_plan_per_layout_keeps_only_its_latest_setting():
    from gradsync.compressors.code_paths import latest_per_layout

    built: list[tuple[tuple[int, ...], float]] = []

    @latest_per_layout(varying=1)
    def plan(sizes: tuple[int, ...], density: float) -> list[float]:
        built.append((sizes, density))
        return [density] * len(sizes)

    assert plan((3, 4), 0.5) is plan((3, 4), 0.5)  # built once
    plan((3, 4), 0.25)  # a warm-up's next density: the 0.5 plan is dropped
    plan((5,), 0.5)  # another layout keeps its own
    plan((3, 4), 0.5)
    assert built == [((3, 4), 0.5), ((3, 4), 0.25), ((5,), 0.5), ((3, 4), 0.5)]
