"""Operations and host synchronizations per compress + decompress, counted on any machine.

The GPU kernel table (``benchmarks.gpu_kernels``) is the judge of a compressor's cost, but it
needs a GPU. Its twin here counts, on a CPU, what a GPU would be asked to do: every ATen
operation (a kernel launch, an allocation or a view: a few microseconds of host time each on a
GPU) and every host synchronization, on the code path a GPU
takes (``gpu_branches``: the CPU-only branches off). Views are counted too (each is a
call through the dispatcher: host work whatever the device), and a fused kernel
(``compressor.fused``) as the kernels Inductor made for it. The counts do not depend on the machine,
so a test can hold them, and they show where a compressor's work grows with its tensors.

A synchronization is a read of device values on the host (``item``, ``tolist``, ``bool()``, a
copy to the host) or an operation whose output size depends on the data (``nonzero``,
``unique``, ``masked_select``, ``repeat_interleave`` without its size). It is *declared* when it
happens inside one of the method's ``host_sync`` points; any other is a bug. On a CPU a
``.cpu()`` or ``.tolist()`` of a tensor that would already be on the host counts as one too:
the count can overstate, never miss, a read it sees. Run from the repo root:

    .venv/bin/python -m benchmarks.op_counts --write
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from gradsync.comm.host_sync import inside_declared
from gradsync.compressors.fused import observe_fused

aten = torch.ops.aten
SYNCING_OPS = frozenset(
    {
        aten._local_scalar_dense.default,  # item(), bool(), int(), float()
        aten.nonzero.default,
        aten.nonzero_static.default,
        aten.masked_select.default,
        aten._unique2.default,
        aten.unique_dim.default,
        aten.unique_consecutive.default,
        aten._unique.default,
        aten.repeat_interleave.Tensor,
    }
)
"""Operations that make the host wait for the device: their result, or its size, is read."""
HOST_READS = frozenset({torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.cpu})
"""Tensor methods that copy device values to the host without an operation of their own."""


@dataclass
class Counts:
    operations: int = 0
    """ATen operations, views included."""
    syncs: Counter[str] = field(default_factory=Counter)
    """Host synchronizations by what caused them, declared ones under "declared: ..."."""
    by_op: Counter[str] = field(default_factory=Counter)

    @property
    def declared(self) -> int:
        return sum(n for what, n in self.syncs.items() if what.startswith("declared"))

    @property
    def undeclared(self) -> int:
        return sum(self.syncs.values()) - self.declared


class _Operations(TorchDispatchMode):
    def __init__(self, counts: Counts) -> None:
        super().__init__()
        self.counts = counts
        self.reading = 0  # inside a host read already counted at the function level

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.counts.operations += 1
        self.counts.by_op[str(func.overloadpacket.__name__)] += 1
        syncs = func in SYNCING_OPS and not (
            func is aten.repeat_interleave.Tensor and (kwargs or {}).get("output_size")
        )
        if syncs and not self.reading:
            _count_sync(self.counts, str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


class _HostReads(TorchFunctionMode):
    def __init__(self, operations: _Operations) -> None:
        super().__init__()
        self.operations = operations

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func not in HOST_READS:
            return func(*args, **(kwargs or {}))
        _count_sync(self.operations.counts, func.__name__)
        self.operations.reading += 1
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.operations.reading -= 1


def _count_sync(counts: Counts, what: str) -> None:
    counts.syncs[f"declared: {what}" if inside_declared() else what] += 1


def count(fn: Callable[[], object]) -> Counts:
    """What one call of ``fn`` asks of the device (see the module's text)."""
    counts = Counts()
    operations = _Operations(counts)

    def fused_call(name: str, kernels: int) -> None:
        counts.operations += kernels
        counts.by_op[f"fused {name}"] += kernels

    with observe_fused(fused_call), _HostReads(operations), operations:
        fn()
    return counts


# ---- compressors on ResNet-18's and ResNet-50's gradients --------------------------------------
COUNT_MODELS = ("ResNet-18", "ResNet-50")
"""62 and 161 tensors: a count that differs between them grows with the number of tensors."""


@dataclass(frozen=True)
class CompressorCount:
    compressor: str
    counts: dict[str, Counts]
    """By model."""
    declared_points: tuple[str, ...]
    """The compressor's ``host_syncs``."""


def compressor_counts(
    options: Sequence[str], models: Sequence[str] = COUNT_MODELS
) -> list[CompressorCount]:
    """Each option's count on each model's gradient, past a warm-up call (layouts and buffers
    made once are not counted). Needs a one-rank default process group."""
    from benchmarks.gpu_kernels import bound_compressor, roundtrip
    from benchmarks.measure import model_group, real_gradient
    from gradsync.compressors.code_paths import gpu_branches

    gradients = {name: (real_gradient(name)[0], model_group(name)) for name in models}
    rows = []
    cpu = torch.device("cpu")
    with gpu_branches():
        for option in options:
            by_model = {}
            compressor = None
            for name, (gradient, group) in gradients.items():
                compressor = bound_compressor(option, cpu)
                call = roundtrip(compressor, gradient, group)
                call()  # warm-up: what is made once per group
                by_model[name] = count(call)
            assert compressor is not None
            points = tuple(sorted(compressor.host_syncs))
            rows.append(CompressorCount(option, by_model, points))
    return rows


QUANTIZERS = ("terngrad", "qsgd", "signsgd")
AT_MOST = {**dict.fromkeys(QUANTIZERS, 30), "dgc": 40, "deft": 40}
"""Goals: operations per compress + decompress (DEFT at one worker)."""
GROWS_WITH_SHAPES = ("powersgd",)
"""Compressors whose count may grow with the number of distinct matrix shapes."""


Earlier = dict[str, dict[str, int]]
"""Operations by compressor and model, counted at another commit (``--save``'s file)."""


def compressor_table(rows: Sequence[CompressorCount], earlier: Earlier, label: str) -> str:
    """Each compressor's operations on each model (beside ``earlier``'s, when given), its host
    syncs per call (a declared point's read: "declared: ..."), and the goal."""
    models = list(rows[0].counts) if rows else list(COUNT_MODELS)
    header = ["compressor"]
    header += [f"{m} ops at {label}" for m in models] if earlier else []
    header += [f"{m} ops" for m in models] + ["host syncs per call", "goal", "met"]
    lines = []
    for row in rows:
        ops = [row.counts[m].operations for m in models]
        before = [str(earlier.get(row.compressor, {}).get(m, "—")) for m in models]
        syncs: Counter[str] = Counter()
        for counts in row.counts.values():
            syncs |= counts.syncs  # the most of each kind on any model
        undeclared = max(c.undeclared for c in row.counts.values())
        shown = ", ".join(f"{what} ×{n}" for what, n in sorted(syncs.items())) or "none"
        cells = [row.compressor, *(before if earlier else []), *(str(n) for n in ops), shown]
        lines.append([*cells, *_goal(row.compressor, ops, undeclared)])
    return _markdown(header, lines)


def _goal(option: str, ops: list[int], undeclared: int) -> tuple[str, str]:
    parts, met = ["no undeclared sync"], undeclared == 0
    if option not in GROWS_WITH_SHAPES:
        parts.append("same on both")
        met = met and len(set(ops)) == 1
    if option in AT_MOST:
        parts.append(f"≤ {AT_MOST[option]}")
        met = met and max(ops) <= AT_MOST[option]
    return "; ".join(parts), "yes" if met else "**no**"


def _markdown(header: list[str], lines: list[list[str]]) -> str:
    rule = ["---" if i == 0 else "---:" for i in range(len(header))]
    rows = [header, rule, *lines]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in rows)


def main() -> None:
    import argparse
    import json
    import tempfile
    from pathlib import Path

    from benchmarks.gpu_jobs import process_group
    from benchmarks.report import machine, publish
    from gradsync.compressors.registry import COMPRESSORS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated compressors (default: all)")
    parser.add_argument("--save", type=Path, help="also write the counts to this JSON file")
    parser.add_argument(
        "--beside", type=Path, help="a --save file of another commit, shown beside (its label)"
    )
    parser.add_argument("--label", default="earlier", help="the --beside file's commit")
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args()
    options = [o for o in args.only.split(",") if o] or list(COMPRESSORS)
    with tempfile.TemporaryDirectory() as tmp, process_group(torch.device("cpu"), Path(tmp) / "s"):
        rows = compressor_counts(options)
    if args.save:
        ops = {r.compressor: {m: c.operations for m, c in r.counts.items()} for r in rows}
        args.save.write_text(json.dumps(ops, indent=1) + "\n")
    earlier: Earlier = json.loads(args.beside.read_text()) if args.beside else {}
    command = "python -m benchmarks.op_counts --write"
    if args.beside:
        command += f" --beside {args.beside} --label {args.label}"
    what = (
        f"`{command}` — {machine()}; one compress + decompress of one backward pass's gradient "
        "(batch 8; one group of all the model's tensors; one worker), after a warm-up call, along "
        "the GPU's code path: ATen operations, views included, a fused kernel as the kernels "
        "Inductor made for it"
    )
    table = compressor_table(rows, earlier, args.label)
    publish(
        "op_counts", "Operations per compress + decompress", f"{what}\n\n{table}", write=args.write
    )


if __name__ == "__main__":
    main()
