"""What one group costs a lockstep scheduler's own machinery, counted on a CPU.

``benchmarks.step_overhead`` times every scheduler against DDP; this says where the time goes,
per group (an exchange: a bucket, a partition) of one steady step on the many tiny layers of
``step_overhead.tiny_layers``, in a world of one gloo worker:

* ATen operations (views included; ``benchmarks.op_counts.count``, a compressor's along a GPU's
  route) of the scheduler's own work: its gradient hooks, ``begin``, ``step``, ``flush``, and
  every job its communication thread runs;
* jobs handed to the communication thread (a queue round trip each; a job that another runs
  inside itself is not one);
* event-like objects the communication thread's pool made per step (``engine.events``: on a
  GPU each is a ``torch.cuda.Event``), and the step timer's marks (on a GPU each is a
  ``torch.cuda.Event`` made for timing, read when a log window is written);
* host microseconds of the training thread in the scheduler's gradient hooks, and in ``step``
  (the median step's sum, per group).

The counts do not depend on the machine; the microseconds do. Run from the repo root:

    PYTHONPATH=. .venv/bin/python -m benchmarks.scheduler_counts
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from omegaconf import DictConfig
from torch import Tensor, nn

from benchmarks.op_counts import Counts, count
from benchmarks.report import machine
from benchmarks.step_overhead import tiny_layers
from gradsync.comm.collective import TorchCollective
from gradsync.compressors.code_paths import gpu_branches
from gradsync.jobs.compose import ConfigError, compose_jobs
from gradsync.schedulers.engine.events import events_made
from gradsync.schedulers.registry import peer_schedulers
from gradsync.train.build import build_sync
from gradsync.train.timing import make_clock

CPU = torch.device("cpu")


@dataclass
class Tally:
    """What the instrumented calls of one step added up to."""

    operations: int = 0
    syncs: int = 0
    jobs: int = 0
    marks: int = 0
    hook_s: float = 0.0
    step_s: float = 0.0
    counting: bool = False

    def add(self, counts: Counts) -> None:
        self.operations += counts.operations
        self.syncs += sum(counts.syncs.values())

    def reset(self, *, counting: bool) -> None:
        """Start a step's tally (the wrappers hold this object, so it changes in place)."""
        self.operations = self.syncs = self.jobs = self.marks = 0
        self.hook_s = self.step_s = 0.0
        self.counting = counting


@dataclass
class Row:
    scheduler: str
    groups: int
    operations: float
    jobs: float
    events: float
    marks: float
    syncs: float
    hook_us: float
    step_us: float


def _counted(tally: Tally, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` that adds its operations to ``tally`` while it is counting."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if not tally.counting:
            return fn(*args, **kwargs)
        result: list[Any] = []
        tally.add(count(lambda: result.append(fn(*args, **kwargs))))
        return result[0]

    return call


def _timed(tally: Tally, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            setattr(tally, name, getattr(tally, name) + time.perf_counter() - start)

    return call


def _instrument(sync: Any, tally: Tally) -> None:
    """Wrap the scheduler's gradient hook, ``begin``, ``step`` and ``flush`` (where the
    priority schedulers' deferred updates land) for counting and timing; before ``attach``,
    which registers the hook."""
    if hasattr(sync, "_on_gradient"):
        sync._on_gradient = _timed(tally, "hook_s", _counted(tally, sync._on_gradient))
    sync.begin = _counted(tally, sync.begin)
    sync.step = _timed(tally, "step_s", _counted(tally, sync.step))
    sync.flush = _counted(tally, sync.flush)


def _instrument_thread(sync: Any, tally: Tally) -> None:
    """Count every job the communication thread runs off its queue, and its operations; and
    the step timer's marks (each a CUDA event made on a GPU)."""
    comm = sync._comm
    execute = comm._execute

    def counted(job: Any) -> Any:
        tally.jobs += 1
        return _counted(tally, execute)(job)

    comm._execute = counted
    timer = sync._timer
    mark = timer.mark

    def marked() -> Any:
        tally.marks += 1
        return mark()

    timer.mark = marked


def compose(name: str, compressor: str) -> DictConfig:
    overrides = [f"scheduler={name}", f"compressor={compressor}", "trainer.workers=1"]
    return compose_jobs(overrides, multirun=False, launcher_here=False)[0]


def measure(name: str, cfg: DictConfig, args: argparse.Namespace) -> Row:
    model = tiny_layers(args.layers, args.width)
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    sync: Any = build_sync(cfg, collective=TorchCollective(), clock=make_clock(CPU))
    tally = Tally()
    _instrument(sync, tally)
    sync.attach(model, opt)
    _instrument_thread(sync, tally)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, args.width, generator=gen), torch.randn(8, args.width, generator=gen)

    def step(number: int) -> None:
        sync.begin(step=number)
        loss: Tensor = nn.functional.mse_loss(model(x), y)
        loss.backward()
        sync.step(step=number, loss=loss.detach())
        opt.zero_grad(set_to_none=True)

    for number in range(args.warmup):  # planning schedulers profile and plan; pools fill
        step(number)
    groups = len(sync.exchange_buckets())
    counted = []
    for number in range(args.warmup, args.warmup + args.counted):
        sync.flush()  # a deferred update belongs to the step before: outside this one's count
        tally.reset(counting=True)
        made = events_made()
        step(number)
        sync.flush()  # this step's deferred update, in its count
        marks = tally.marks
        counted.append((tally.operations, tally.syncs, tally.jobs, events_made() - made, marks))
    hooks, steps = [], []
    first = args.warmup + args.counted
    for number in range(first, first + args.timed):
        tally.reset(counting=False)
        step(number)
        hooks.append(tally.hook_s)
        steps.append(tally.step_s)
    sync.flush()
    sync.close()
    operations, syncs, jobs, events, marks = (
        statistics.median(c) for c in zip(*counted, strict=True)
    )
    return Row(
        scheduler=name,
        groups=groups,
        operations=operations / groups,
        jobs=jobs / groups,
        events=events,
        marks=marks,
        syncs=syncs,
        hook_us=statistics.median(hooks) / groups * 1e6,
        step_us=statistics.median(steps) / groups * 1e6,
    )


def table(rows: list[Row], args: argparse.Namespace, command: str) -> str:
    lines = [
        f"`{command}` — one gloo worker ({machine()}), an MLP of {args.layers} linear layers of "
        f"width {args.width} ({2 * args.layers} tensors), `compressor={args.compressor}`; counts "
        f"of the median of {args.counted} steps, microseconds of the median of {args.timed}, "
        f"after {args.warmup} warm-up steps",
        "",
        "| scheduler | groups | ATen ops/group | jobs handed/group | events made/step "
        "| timer marks/step | host syncs/step | hook µs/group | step() µs/group |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.scheduler} | {r.groups} | {r.operations:.1f} | {r.jobs:.2f} | "
            f"{r.events:.0f} | {r.marks:.0f} | {r.syncs:.0f} | {r.hook_us:.1f} | "
            f"{r.step_us:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=51)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--compressor", default="none")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--counted", type=int, default=3, help="steps whose operations count")
    parser.add_argument("--timed", type=int, default=30, help="steps whose hooks are timed")
    parser.add_argument("--schedulers", nargs="+", default=None, choices=peer_schedulers())
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        try:
            with gpu_branches():  # a compressor's operations as a GPU would launch them
                for name in args.schedulers or peer_schedulers():
                    try:
                        cfg = compose(name, args.compressor)
                    except ConfigError as exc:  # a combination gradsync refuses: say so, go on
                        print(f"{name}: skipped ({exc})".splitlines()[0], file=sys.stderr)
                        continue
                    rows.append(measure(name, cfg, args))
        finally:
            dist.destroy_process_group()
    command = " ".join(["python -m benchmarks.scheduler_counts", *sys.argv[1:]])
    print(table(rows, args, command))


if __name__ == "__main__":
    main()
