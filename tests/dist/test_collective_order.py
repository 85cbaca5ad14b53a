"""The rules that keep schedulers correct on NCCL, checked on gloo: every rank issues the same
collectives on every communicator in the same order, and the compute (hook) thread issues none
while a step's communication is under way (the communication thread issues them all, and only
its collectives may be in flight together).

One world runs every registered scheduler whose workers exchange among themselves in lockstep
(the parameter servers have ``test_collective_order_ps.py``), built from its registry entry as a
worker builds it, with every compressor that talks while it compresses (TernGrad's scalers,
union top-k's indices, CLT-k's and DEFT's broadcasts and gathers); an instrumented collective
records each call on each rank. A new registry entry runs there with no edit here.

Where the registry says its exchanges never overlap, no collective runs beside another. Where
they may (``concurrent_exchanges``: the exchange engine starts every group's all-reduce and
goes on), collectives of the communication thread may overlap each other, but the compute
thread issues none while any is in flight. The priority schedulers
(ByteScheduler, US-Byte: the options of ``gradsync/schedulers/priority/``) all-reduce their
partitions asynchronously under a credit, so several of their exchanges may be open at once,
but only on the communication thread, which issues all their collectives.

Another world runs ``scheduler=deft`` (one link and two, from a saved profile, and profiled in
the job). Its all-reduces are started asynchronously, so both links can be busy at once and the
sends of a gradient applied later run on past the step."""

from __future__ import annotations

import functools
import itertools
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from gradsync.comm.collective import TorchCollective
from gradsync.compressors.cltk import CLTKCompressor
from gradsync.compressors.deft import DEFTCompressor
from gradsync.compressors.terngrad import TernGradCompressor
from gradsync.compressors.topk import TopKCompressor
from gradsync.config.instantiate import build
from gradsync.feedback.none import NoneFeedback
from gradsync.feedback.residual import ResidualFeedback
from gradsync.schedulers.deft.deft import DeftSync
from gradsync.schedulers.engine.buckets import Buckets
from gradsync.schedulers.engine.comm_thread import THREAD_NAME
from gradsync.schedulers.registry import SCHEDULERS, allreducible_problem, peer_schedulers
from tests.helpers.dist import run_world
from tests.helpers.training import local_loss, on_device, sgd, tiny_data, tiny_model

pytestmark = pytest.mark.dist

STEPS = 3
WORKERS = 2
COMPRESSORS = {
    "terngrad": TernGradCompressor,
    "topk-union": lambda: TopKCompressor(density=0.3, exchange="union"),
    "cltk": lambda: CLTKCompressor(density=0.3),
    "deft": lambda: DEFTCompressor(density=0.3),
}
LOCKSTEP = peer_schedulers()
"""The schedulers of the first world: the registry's, but the parameter servers."""
OPTIONS = {  # sizes and steps for the tiny model (436 elements) and STEPS; others: defaults
    "wfbp": {"bucket_mb": 0.001, "first_bucket_mb": 0.001},
    "mgs": {"threshold": 100},
    "omgs": {"rule": "optimal", "profile_steps": 1},
    # Partitions that cut tensors, a credit of about two partitions.
    "bytescheduler": {"partition_size": 50, "credit": 100},
    "usbyte": {  # the link timed at start-up, planned after two steps
        "min_partition_size": 16,
        "max_partition_size": 64,
        "credit": 100,
        "profile_steps": 1,
    },
    "deft": {"partition_size": 100, "profile_steps": 1},  # profiled in the job, then planned
}


def _concurrent(scheduler: str) -> bool:
    """Several of its exchanges may be in flight at once (its registry entry says)."""
    return SCHEDULERS[scheduler].capabilities.concurrent_exchanges


def _priority(scheduler: str) -> bool:
    """One of the priority schedulers: its options live in ``gradsync/schedulers/priority/``."""
    return SCHEDULERS[scheduler].config.__module__.startswith("gradsync.schedulers.priority.")


DEFT_STEPS = 6
DEFT_PARTITION = 100  # elements: the tiny model's 436 make 5 buckets
DEFT_SCHEDULERS = {  # options besides the profile file, which the fixture writes
    "deft": {},
    "deft-two-links": {"links": 2},
    "deft-profiled": {"profile_steps": 1},
}


@dataclass(frozen=True)
class Call:
    communicator: str
    operation: str
    shapes: tuple
    thread: str
    in_flight: tuple[tuple[str, str], ...]
    """(thread, communicator) of every other collective not finished when this one began."""
    step: int | None
    """The step whose ``begin`` .. ``step`` issued it (None: between steps)."""


class CallLog:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.step: int | None = None
        self._open: dict[int, tuple[str, str]] = {}
        self._tokens = itertools.count()
        self._lock = threading.Lock()

    def begin(self, communicator: str, operation: str, shapes: tuple) -> int:
        thread = threading.current_thread().name
        with self._lock:
            in_flight = tuple(sorted(self._open.values()))
            call = Call(communicator, operation, shapes, thread, in_flight, self.step)
            self.calls.append(call)
            token = next(self._tokens)
            self._open[token] = (thread, communicator)
        return token

    def end(self, token: int) -> None:
        with self._lock:
            self._open.pop(token, None)  # a finish may be waited for twice


def _shapes(payload, *, ragged: bool = False) -> tuple:
    """dtype and shape of each tensor; an all-gather's lengths may differ between ranks
    (the wire pads them), so only their trailing dimensions are compared."""
    return tuple((str(t.dtype), tuple(t.shape[1:] if ragged else t.shape)) for t in payload)


class RecordingCollective(TorchCollective):
    forks = itertools.count(1)

    def __init__(self, *, log: CallLog, name: str = "default", **options) -> None:
        super().__init__(**options)
        self.log, self.name = log, name

    def fork(self, *, interface=None):
        plain = super().fork(interface=interface)
        name = f"fork{next(self.forks)}"
        return RecordingCollective(log=self.log, name=name, group=plain.group)

    def _recorded(self, operation: str, shapes: tuple, run):
        token = self.log.begin(self.name, operation, shapes)
        try:
            return run()
        finally:
            self.log.end(token)

    def all_reduce(self, payload, *, op="sum"):
        run = lambda: super(RecordingCollective, self).all_reduce(payload, op=op)  # noqa: E731
        return self._recorded(f"all_reduce/{op}", _shapes(payload), run)

    def start_all_reduce(self, payload, *, op="sum"):
        token = self.log.begin(self.name, f"all_reduce/{op}", _shapes(payload))
        return self._ending(token, super().start_all_reduce(payload, op=op))

    def _ending(self, token: int, finish):
        """``finish``, which also ends the recorded call when it returns."""

        def finished():
            try:
                return finish()
            finally:
                self.log.end(token)

        return finished

    def all_gather(self, payload, *, same_shape=False):
        run = lambda: super(RecordingCollective, self).all_gather(  # noqa: E731
            payload, same_shape=same_shape
        )
        # A caller that says the shapes are the same everywhere is held to it in full.
        shapes = _shapes(payload, ragged=not same_shape)
        return self._recorded(f"all_gather/same_shape={same_shape}", shapes, run)

    def broadcast(self, payload, *, src):
        run = lambda: super(RecordingCollective, self).broadcast(payload, src=src)  # noqa: E731
        return self._recorded(f"broadcast/{src}", _shapes(payload), run)

    def reduce_metrics(self, values, *, device, op="sum"):
        run = lambda: super(RecordingCollective, self).reduce_metrics(  # noqa: E731
            values, device=device, op=op
        )
        return self._recorded(f"reduce_metrics/{op}", (len(values),), run)


def _refused(scheduler: str, compressor) -> bool:
    """What the config layer refuses: an all-reducing scheduler with payloads that do not add
    up, or compression for a scheduler that takes none."""
    return (
        allreducible_problem(scheduler, type(compressor).__name__, compressor.allreducible)
        is not None
        or SCHEDULERS[scheduler].capabilities.dense_only
    )


def _engine(scheduler: str, options: dict):
    """The scheduler's engine factory, from its registry entry's options with ``options`` set,
    as a worker builds it (it adds the compressor, error feedback, collective and clock)."""
    node = OmegaConf.merge(OmegaConf.structured(SCHEDULERS[scheduler].config), options)
    return build(node, path="scheduler")


def _train(
    rank: int, world_size: int, scheduler: str, compressor, costs: str, device: str
) -> list[Call]:
    options = OPTIONS.get(scheduler, {})
    if SCHEDULERS[scheduler].capabilities.fits_in_place:
        options = {**options, "costs": costs}  # planned from a file: no microbenchmarks
    engine = _engine(scheduler, options)
    return _recorded_training(world_size, engine, compressor, STEPS, device)


def _recorded_training(
    world_size: int, engine, compressor, steps: int, device: str = "cpu"
) -> list[Call]:
    log = CallLog()
    model = tiny_model().to(device)
    opt = sgd(model)
    feedback = ResidualFeedback() if compressor.error_feedback else NoneFeedback()
    collective = RecordingCollective(log=log)
    sync = engine(
        compressor=compressor,
        feedback=feedback,
        collective=collective,
        clock=time.perf_counter,
    )
    return run_steps(sync, model, opt, log, collective.rank, world_size, steps)


def run_steps(
    sync, model, opt, log: CallLog, rank: int, world_size: int, steps: int = STEPS
) -> list[Call]:
    """Attach ``sync`` and train ``steps`` steps, each call marked with its step; the calls."""
    data = on_device(tiny_data(steps, world_size), next(model.parameters()).device)
    sync.attach(model, opt)
    for step in range(steps):
        log.step = step
        sync.begin(step=step)
        loss = local_loss(model, data, step, rank, world_size)
        loss.backward()
        sync.step(step=step, loss=loss.detach())
        log.step = None
        opt.zero_grad(set_to_none=True)
    sync.flush()  # the priority schedulers' last exchanges, before the next case starts
    return log.calls


def _record_all(rank: int, world_size: int, costs: str, device: str = "cpu") -> dict:
    """Every lockstep scheduler with every compressor that talks, on ``device`` (the ranks'
    current GPU under ``"cuda"``), each call recorded."""
    records = {}
    for scheduler, name in itertools.product(LOCKSTEP, COMPRESSORS):
        compressor = COMPRESSORS[name]()
        if not _refused(scheduler, compressor):
            records[scheduler, name] = _train(
                rank, world_size, scheduler, compressor, costs, device
            )
    return {"records": records, "compute_thread": threading.current_thread().name}


@dataclass(frozen=True)
class Placed:
    """Where a recording world runs: ``workers`` ranks on ``device`` (``run_world``'s: cpu,
    or every rank on one GPU, ``SHARED_GPU``), given ``timeout`` seconds."""

    workers: int = WORKERS
    device: str = "cpu"
    timeout: float = 120

    def run(self, record, root: Path, inputs: Path) -> list[dict]:
        """``record(rank, world_size, inputs, torch device)`` on every rank of the world."""
        on = "cpu" if self.device == "cpu" else "cuda"
        return run_world(
            record, self.workers, root / "world", str(inputs), on,
            device=self.device, timeout=self.timeout,
        )  # fmt: skip


def record_world(root: Path, placed: Placed = Placed()) -> list[dict]:
    """Every rank's records of ``_record_all``."""
    root.mkdir(parents=True, exist_ok=True)
    costs = root / "costs.json"
    costs.write_text(json.dumps({"gamma": 1e-9, "alpha": 1e-4, "beta": 1e-9}))
    return placed.run(_record_all, root, costs)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> list[dict]:
    return record_world(tmp_path_factory.mktemp("order"))


def _record_deft(rank: int, world_size: int, times: str, device: str = "cpu") -> dict:
    records = {}
    for scheduler, name in itertools.product(DEFT_SCHEDULERS, COMPRESSORS):
        compressor = COMPRESSORS[name]()
        if _refused("deft", compressor):
            continue
        options = {"partition_size": DEFT_PARTITION, **DEFT_SCHEDULERS[scheduler]}
        if "profile_steps" not in options:
            options["times"] = times
        records[scheduler, name] = _recorded_training(
            world_size, functools.partial(DeftSync, **options), compressor, DEFT_STEPS, device
        )
    return {"records": records, "compute_thread": threading.current_thread().name}


def record_deft_world(root: Path, placed: Placed = Placed()) -> list[dict]:
    """DeFT from a profile whose windows are tight: buckets wait, updates merge, the second
    link carries some, and a gradient's sends run on past the step that started them."""
    root.mkdir(parents=True, exist_ok=True)
    sizes = [p.numel() for p in tiny_model().parameters()][::-1]
    buckets = Buckets.partition(sizes, DEFT_PARTITION)
    n = len(buckets)
    times = root / "times.json"
    profile = {"forward": [1e-3] * n, "backward": [1e-3] * n, "comm": [2.5e-3] * n, "mu": 1.65}
    times.write_text(json.dumps({"bounds": list(buckets.bounds), **profile}))
    return placed.run(_record_deft, root, times)


@pytest.fixture(scope="module")
def deft_world(tmp_path_factory) -> list[dict]:
    return record_deft_world(tmp_path_factory.mktemp("deft-order"))


def test_every_combination_the_config_allows_ran(world):
    every_combination_the_config_allows_ran(world)


def every_combination_the_config_allows_ran(world: list[dict]) -> None:
    cases = set(world[0]["records"])
    assert {scheduler for scheduler, _ in cases} == set(LOCKSTEP)
    assert ("wfbp", "terngrad") not in cases  # TernGrad all-gathers: wfbp refuses it
    assert ("bytescheduler", "terngrad") not in cases
    assert ("bytescheduler", "topk-union") in cases
    # TernGrad is the one refused, by every scheduler that sums payloads on the wire.
    summing = [s for s in LOCKSTEP if SCHEDULERS[s].capabilities.allreduces]
    assert len(cases) == len(LOCKSTEP) * len(COMPRESSORS) - len(summing)
    for calls in world[0]["records"].values():
        assert any(c.step is not None for c in calls)  # these compressors talk in every step


def test_every_rank_issues_the_same_collectives_in_the_same_order(world):
    same_order_on_every_rank(world, "records")


def same_order_on_every_rank(world: list[dict], kind: str) -> None:
    for case, calls in world[0][kind].items():
        for other in world[1:]:
            theirs = other[kind][case]
            for communicator in {c.communicator for c in calls} | {c.communicator for c in theirs}:
                mine = [(c.operation, c.shapes) for c in calls if c.communicator == communicator]
                same = [(c.operation, c.shapes) for c in theirs if c.communicator == communicator]
                assert mine == same, (case, communicator)


def test_collectives_in_flight_together_are_all_the_communication_threads(world):
    """Where the registry says a scheduler's exchanges may overlap, they do only on the
    communication thread: it starts a group's all-reduce and goes on to the next group's
    exchange, or to a compressor's talk, in its one order. Where it says they never do, no
    collective runs beside another."""
    overlapped = set()
    for rank in world:
        for case, calls in rank["records"].items():
            for call in calls:
                if not call.in_flight:
                    continue
                assert _concurrent(case[0]), (case, call)
                assert call.thread == THREAD_NAME, (case, call)
                assert all(thread == THREAD_NAME for thread, _ in call.in_flight), (case, call)
                overlapped.add(case[0])
    assert "lags" in overlapped  # a group's exchange is issued while the last one's runs


def nothing_runs_beside_another(ranks: list[dict], which=lambda case: True) -> None:
    """No call of the cases ``which`` picks began while another was in flight."""
    for rank in ranks:
        for case, calls in rank["records"].items():
            if which(case):
                for call in calls:
                    assert call.in_flight == (), (case, call)


def test_the_compute_thread_issues_no_collective_until_the_steps_communication_is_done(world):
    """Within a step, the hook (compute) thread may talk only after the last collective of the
    other threads (planning at the step's end); with the test below, after it finished."""
    for rank in world:
        compute = rank["compute_thread"]
        for case, calls in rank["records"].items():
            for step in range(STEPS):
                threads = [c.thread for c in calls if c.step == step]
                others = [i for i, thread in enumerate(threads) if thread != compute]
                first_own = threads.index(compute) if compute in threads else len(threads)
                assert not others or first_own > others[-1], (case, step, threads)


def test_the_compute_thread_issues_nothing_while_a_collective_is_in_flight(world):
    """Exchanges may overlap each other where the registry says so (started by the
    communication thread, finished later); a collective of the compute thread never overlaps
    anything."""
    compute_thread_never_beside_another(world)


def compute_thread_never_beside_another(ranks: list[dict]) -> None:
    for rank in ranks:
        compute = rank["compute_thread"]
        for case, calls in rank["records"].items():
            for call in calls:
                if call.thread == compute:
                    assert call.in_flight == (), (case, call)
                assert all(thread != compute for thread, _ in call.in_flight), (case, call)


def test_deft_ran_with_every_compressor_whose_payloads_add_up(deft_world):
    cases = set(deft_world[0]["records"])
    assert ("deft", "terngrad") not in cases  # TernGrad all-gathers: deft refuses it
    assert len(cases) == len(DEFT_SCHEDULERS) * (len(COMPRESSORS) - 1)
    for calls in deft_world[0]["records"].values():
        assert any(c.step is not None for c in calls)
    two_links = deft_world[0]["records"]["deft-two-links", "deft"]
    assert len({c.communicator for c in two_links}) == 3  # the job's group and two links
    # Both links busy at once: an all-reduce issued while the other link's is in flight.
    assert any(
        c.operation.startswith("all_reduce")
        and any(other not in ("default", c.communicator) for _, other in c.in_flight)
        for c in two_links
    )


def test_deft_ranks_issue_the_same_collectives_in_the_same_order(deft_world):
    test_every_rank_issues_the_same_collectives_in_the_same_order(deft_world)


def test_deft_compute_thread_issues_nothing_while_a_collective_is_in_flight(deft_world):
    """The links' all-reduces may overlap each other (started by the communication thread,
    finished later); a collective of the compute thread (planning at a step's end) never
    overlaps anything, and within a step only the communication thread issues them until
    that step's communication is done."""
    test_the_compute_thread_issues_no_collective_until_the_steps_communication_is_done(deft_world)
    compute_thread_never_beside_another(deft_world)
    for rank in deft_world:
        for case, calls in rank["records"].items():
            for call in calls:
                if call.step is not None and "profile_steps" not in DEFT_SCHEDULERS[case[0]]:
                    assert call.thread == THREAD_NAME, (case, call)


def test_priority_schedulers_issue_every_collective_from_the_communication_thread(world):
    """The hook (compute) thread issues none, not even the compressors' talk or US-Byte's
    link timing and planning; exchanges open at once (under the credit) are all that thread's."""
    assert any(_priority(scheduler) for scheduler in LOCKSTEP)
    for rank in world:
        compute = rank["compute_thread"]
        for case, calls in rank["records"].items():
            if not _priority(case[0]):
                continue
            for call in calls:
                assert call.thread != compute, (case, call)
                assert all(thread == call.thread for thread, _ in call.in_flight), (case, call)
