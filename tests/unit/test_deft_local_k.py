"""A lone DEFT worker's plan on the device (gradsync/compressors/deft_local_k.py): the Triton
program a GPU runs gives the definition's k's and runs, bit for bit, on norms with ties, zeros,
wide spreads and every gradient type (run by Triton's interpreter on this CPU), and compiles for
a GPU (sm_90). Without Triton (a CPU-only torch) there is no such program to test."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from gradsync.algorithms.deft_plan import assign_local_k, local_k_bound
from gradsync.compressors.deft_local_k import lone_plan

triton = pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]

_AGAINST_THE_DEFINITION = textwrap.dedent(
    """
    import random
    import torch
    from gradsync.algorithms.deft_plan import local_k_bound
    from gradsync.compressors.deft_local_k import lone_plan
    from gradsync.compressors.deft_local_k_triton import lone_plan_program

    rng = random.Random(0)
    for case in range(24):
        count = rng.choice([1, 2, 5, 40])
        sizes = [rng.choice([1, 3, rng.randint(1, 60), rng.randint(1, 5000)]) for _ in range(count)]
        norm = lambda: rng.choice([0.0, 1.0, 0.5, rng.random(), rng.random() * 1e4, 1e-30])
        squares = torch.tensor([norm() for _ in range(count)], dtype=torch.float64) ** 2
        k = rng.choice([1, count, rng.randint(1, sum(sizes)), sum(sizes)])
        exact = case % 2 == 1
        dtype = [torch.float32, torch.float16, torch.bfloat16, torch.float64][case % 4]
        first = torch.tensor([sum(min(n, k) for n in sizes[:j]) for j in range(count)])
        total = local_k_bound(sizes, k, exact=exact)
        args = (squares, torch.tensor(sizes), first, k, total, exact, dtype)
        want = [t.tolist() for t in lone_plan(*args)]
        got = [t.tolist() for t in lone_plan_program(*args)]
        assert got == want, (case, squares.tolist(), sizes, k, exact, dtype, want, got)

    # NaN and infinite norms: no crash, and every k within its layer.
    squares = torch.tensor([float("nan"), 4.0, float("inf"), 1.0], dtype=torch.float64)
    sizes = torch.tensor([10, 10, 10, 10])
    for exact in (False, True):
        ks = lone_plan_program(squares, sizes, torch.tensor([0, 5, 10, 15]), 20, 24, exact,
                               torch.float32)[0]
        assert bool(((ks >= 0) & (ks <= sizes)).all()), ks
    print("ok")
    """
)


def test_the_triton_program_gives_the_definitions_plan():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", _AGAINST_THE_DEFINITION],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


@pytest.mark.parametrize("exact", [False, True])
def test_the_triton_program_compiles_for_a_gpu(exact):
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from gradsync.compressors.deft_local_k_triton import _RANK_LANES, _lone_plan_kernel

    signature = dict.fromkeys(
        ["sizes_ptr", "first_ptr", "ks_ptr", "lengths_ptr", "shifts_ptr", "floor_ptr"], "*i64"
    )
    signature |= {"order_ptr": "*i64", "squares_ptr": "*fp64", "ascending_ptr": "*fp64"}
    signature |= {"prefix_ptr": "*fp64", "count": "i32", "k": "i32", "total": "i64"}
    signature |= dict.fromkeys(["exact", "norm_type", "lanes"], "constexpr")
    for norm in (tl.float32, tl.float16, tl.bfloat16, tl.float64):
        constants = {"exact": exact, "norm_type": norm, "lanes": _RANK_LANES}
        source = ASTSource(fn=_lone_plan_kernel, signature=signature, constexprs=constants)
        compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32))
        ptx = compiled.asm["ptx"]
        # The host rule's float64 arithmetic, correctly rounded, not approximated; norms
        # rounded to nearest, as torch rounds them.
        assert "div.rn.f64" in ptx and "sqrt.rn.f64" in ptx and "div.full" not in ptx
        assert ("cvt.rn.f32.f64" in ptx) is (norm != tl.float64) and "cvt.rz." not in ptx


def test_the_definition_is_the_host_rule_on_the_rounded_norms():
    norms = torch.tensor([3.0, 2.0, 1.0, 0.0, 2.0])
    sizes = [100, 100, 100, 5, 1]
    ks, lengths, _, floor = lone_plan(
        norms.double() ** 2,
        torch.tensor(sizes),
        torch.tensor([0, 9, 20, 30, 33]),
        7,
        12,
        False,
        torch.float32,
    )
    assert ks.tolist() == assign_local_k(norms.tolist(), sizes, 7)
    assert sum(lengths.tolist()) == 12 == local_k_bound(sizes, 7)
    assert lengths[0] == 12 - sum(ks.tolist()) and floor.tolist() == [0]
