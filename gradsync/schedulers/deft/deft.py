"""``scheduler=deft``: DeFT's delayed, knapsack-scheduled communication
(docs/methods/schedulers/deft.md).

The gradient, flattened in backward order, is cut into buckets. Each iteration the two-queue
state machine (``DeftQueues``) decides what is sent when: buckets of the gradient being
synchronized (CUR) during the forward pass and during backward, and buckets of the new gradient
as soon as backward has produced them. Whatever does not fit is kept locally: iterations whose
gradients wait are summed into FUT and travel together later. The optimizer steps only when a
whole gradient has been synchronized, with the mean (or the sum) over the merged iterations; on
other iterations it does not step at all (the authors' code zeroes the gradient and steps, so
momentum and weight decay still move the weights). A step waits only for the exchanges of what
it applies: the new gradient's buckets sent during backward are applied steps later, so their
all-reduces run on over the next forward pass (``sched/carried_buckets``).

Every send goes through the shared engine: the hook (or ``begin``) compensates and compresses
its bucket, and the scheduler's one communication thread issues its all-reduce in the order the
queues fixed, identical on every rank. The thread only starts each all-reduce and moves on, so
both links can be busy at once while the order in which sends are issued stays the plan's; the
step waits for the completion of exactly the buckets it applies.

Two buffers hold the gradients: ``current`` (CUR: all-reduced in place, bucket by bucket) and
``future`` (FUT plus the gradient backward is producing). When a new gradient becomes current
they swap.

The first ``profile_steps`` steps (after a warm-up step) run as WFBP while they measure each
bucket's forward time F (module hooks), backward time B (gradient hooks) and communication time
C (timed all-reduces of each bucket's size on the link, the slowest worker's), plus what the
Preserver needs (loss, ‖g‖², the spread of the workers' gradients). Buckets whose C exceeds the
smallest window are split, the Preserver enlarges the knapsacks until delaying costs no
convergence, and the schedule starts. ``scheduler.links=2`` sends the second knapsack over a
second process group concurrently (its own shaped link under ``runner=netem``). These timings
feed the plan, so they use the synchronizing clock; the steps themselves are timed with the
engine's ``StepTimer``.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from typing_extensions import Unpack

from gradsync.algorithms.deft_queues import DeftQueues, Gradient, Step, steady_period
from gradsync.algorithms.knapsack import DEFAULT_UNIT
from gradsync.algorithms.preserver import EPSILON, MAX_RETRIES, Decision, LossWalk, preserve
from gradsync.algorithms.simulator import PAPER_MU
from gradsync.comm.collective import second_link_interface
from gradsync.schedulers.deft.config import (
    DEFT_STALENESS_CORRECTION,
    LINKS,
    MERGE_REDUCTION,
    PARTITION_SIZE,
    PROFILE_STEPS,
    DeftSchedulerConfig,
)
from gradsync.schedulers.engine.buckets import Buckets, ForwardTimer
from gradsync.schedulers.engine.engine import EngineParts, ExchangeEngine
from gradsync.schedulers.engine.exchange import Bucket, Exchanged, Received
from gradsync.schedulers.engine.hooks import ModelHooks, hook_model
from gradsync.schedulers.engine.profiling import median_seconds
from gradsync.schedulers.engine.queued_collective import QueuedCollective
from gradsync.schedulers.engine.residuals import bucket_name, rebucket_residuals
from gradsync.schedulers.engine.staleness import StalenessCorrection
from gradsync.schedulers.staleness_options import DC_LAMBDA
from gradsync.schedulers.summing import require_allreducible
from gradsync.types import Collective, GroupInfo, Payload, SyncStats

log = logging.getLogger("gradsync")

PRESERVER_HORIZON = 60  # iterations of the schedule run to find its steady period
PROFILE_FILE = "deft_profile.json"
CURRENT, NEW = 0, 1  # tags of a send: a bucket of CUR, or of the gradient backward produced
SPLIT_OVERHEAD = 1.1  # a split is kept if it adds at most 10% to the total communication
_MAX_TICKS = 20_000  # knapsack resolution: windows of at most this many time units


@dataclass(frozen=True)
class BucketProfile:
    """What the schedule is solved from; saved with the run and accepted back as
    ``scheduler.times``."""

    bounds: tuple[int, ...]
    forward: tuple[float, ...]
    backward: tuple[float, ...]
    comm: tuple[float, ...]
    mu: float

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BucketProfile:
        given: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls(**given)

    @classmethod
    def read(cls, path: str | Path) -> BucketProfile:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1) + "\n", encoding="utf-8")

    @property
    def coverage_rate(self) -> float:
        compute = sum(self.forward) + sum(self.backward)
        return sum(self.comm) / compute if compute > 0 else math.inf


@dataclass
class _Gradient:
    """A flat buffer in backward order, all-reduced in place bucket by bucket."""

    flat: Tensor
    updates_at: int = 0
    """Updates applied before its first iteration's backward: how old it is when applied."""
    weights_at: Tensor | None = None
    """The weights of its first iteration (flat, backward order), kept only for
    staleness_correction=dc."""


@dataclass
class _Profile:
    """Per-tensor sums over the profiled steps, and the Preserver's samples."""

    forward: list[float]
    backward: list[float]
    steps: int = 0
    loss: float = 0.0
    norms: list[float] = field(default_factory=list)
    """‖ḡ‖² of the averaged gradient, per step."""
    spreads: list[float] = field(default_factory=list)
    """Variance over workers of ḡ·g_w, per step."""
    curvatures: list[float] = field(default_factory=list)
    """‖ḡ_t − ḡ_{t−1}‖ / ‖w_t − w_{t−1}‖ between profiled steps: the loss's curvature along
    the path (of the order of the Hessian's largest eigenvalue: 6–17 by power iteration
    against 8–14 from this on the Fashion-MNIST CNN), which bounds a stable step."""
    previous: tuple[Tensor, Tensor] | None = None
    """The last profiled step's averaged gradient and the weights it was computed at."""


class DeftSync(ExchangeEngine):
    buckets: Buckets  # set by attach()

    def __init__(
        self,
        *,
        partition_size: int = PARTITION_SIZE,
        links: int = LINKS,
        mu: float | None = None,
        merge_reduction: str = MERGE_REDUCTION,
        delay: bool = DeftSchedulerConfig.delay,
        profile_steps: int = PROFILE_STEPS,
        times: str | None = None,
        preserver: bool = DeftSchedulerConfig.preserver,
        epsilon: float = EPSILON,
        preserver_retries: int = MAX_RETRIES,
        staleness_correction: str = DEFT_STALENESS_CORRECTION,
        dc_lambda: float = DC_LAMBDA,
        **parts: Unpack[EngineParts],
    ) -> None:
        super().__init__(**parts)
        self.staleness_correction, self.dc_lambda = staleness_correction, dc_lambda
        require_allreducible("deft", "buckets", self.compressor)
        self.partition_size, self.links, self.given_mu = partition_size, links, mu
        self.merge_reduction, self.delay = merge_reduction, delay
        self.profile_steps, self.times_file = profile_steps, times
        self.use_preserver, self.epsilon, self.retries = preserver, epsilon, preserver_retries
        self._links: list[QueuedCollective] = []
        """The exchanges' process groups, each issued to by the communication thread."""
        self._profile: _Profile | None = None
        self._forward_timer: ForwardTimer | None = None
        self.times: BucketProfile | None = None
        self._metrics: dict[str, float] = {}
        self._plan_now: Step | None = None
        self._in_flight: list[Exchanged[Received]] = []
        """Sends of a gradient not applied in the step that launched them."""
        self._updates = 0
        """Updates applied so far."""

    # ---- set-up -------------------------------------------------------------------------------
    def attach(self, model: nn.Module, optimizer: Optimizer) -> None:
        super().attach(model, optimizer)  # the communication thread, timer, queued compressor
        self._sizes = self.sizes()
        self._offsets = [0]
        for size in self._sizes:
            self._offsets.append(self._offsets[-1] + size)
        like = self._params[0]
        self._current = _Gradient(
            torch.zeros(self._offsets[-1], dtype=like.dtype, device=like.device)
        )
        self._future = _Gradient(torch.zeros_like(self._current.flat))
        self._correction = StalenessCorrection(
            self.staleness_correction, dc_lambda=self.dc_lambda, optimizer=optimizer
        )
        self._starts(self._future)
        assert self._comm is not None
        # The links get groups of their own: their all-reduces stay in flight while the
        # compressor's collectives (on the job's group) are issued after them.
        forks = [self.collective.fork()]
        if self.links == 2:
            # Its own interface when the host has one (runner=netem runner.second_bandwidth).
            forks.append(self.collective.fork(interface=second_link_interface()))
        self._links = [QueuedCollective(fork, self._comm, self._timer) for fork in forks]
        hook_model(
            model,
            self._params,
            ModelHooks(on_gradient=self._on_gradient, on_forward_end=self._on_forward_end),
        )
        if self.times_file:
            self._use_times(BucketProfile.read(self.times_file))
        else:
            self._use_buckets(Buckets.partition(self._sizes, self.partition_size))
            self._queues = self._wfbp_queues()
            self._profile = _Profile([0.0] * len(self._params), [0.0] * len(self._params))
            self._forward_timer = ForwardTimer(model, self._params, self.clock)
            self._local = torch.zeros_like(self._current.flat)  # a worker's own gradient

    def exchange_buckets(self) -> Buckets:
        return self.buckets

    def _use_buckets(self, buckets: Buckets) -> None:
        if getattr(self, "buckets", None) is not None and buckets != self.buckets:
            self._rebucket_residuals(buckets)
        self.buckets = buckets
        self._overlaps = buckets.overlaps(self._sizes)

    def _wfbp_queues(self) -> DeftQueues:
        n = len(self.buckets)
        return DeftQueues(
            comm=[0.0] * n, backward=[0.0] * n, forward_time=0, backward_time=0, delay=False
        )

    def _queues_for(self, times: BucketProfile, scale: float = 1.0) -> DeftQueues:
        window = max(sum(times.forward), sum(times.backward)) * scale
        return DeftQueues(
            comm=times.comm,
            backward=times.backward,
            forward_time=sum(times.forward),
            backward_time=sum(times.backward),
            unit=max(DEFAULT_UNIT, window / _MAX_TICKS),
            delay=self.delay,
            mu=times.mu if self.links == 2 else None,
            capacity_scale=scale,
        )

    def _use_times(self, times: BucketProfile, scale: float = 1.0) -> None:
        if times.bounds[-1] != self._offsets[-1]:
            raise ValueError(
                f"the DeFT profile covers {times.bounds[-1]} gradient elements but this model "
                f"has {self._offsets[-1]}: profile this model (leave scheduler.times unset)"
            )
        self.times = times
        self._use_buckets(Buckets(times.bounds))
        self._queues = self._queues_for(times, scale)
        self._metrics.update(
            {
                "sched/buckets": float(len(self.buckets)),
                "sched/coverage_rate": times.coverage_rate,
                "sched/mu": times.mu,
                "sched/capacity_scale": scale,
            }
        )

    def _rebucket_residuals(self, buckets: Buckets) -> None:
        """Error-feedback residuals are kept per bucket: carry them over to new bounds."""
        rebucket_residuals(self.feedback, self.buckets, buckets, like=self._params[0])

    # ---- one step -----------------------------------------------------------------------------
    def begin(self, *, step: int, epoch: int = 0) -> None:
        super().begin(step=step, epoch=epoch)
        self._plan_now = self._queues.step()
        self._launched_sends: dict[int, Exchanged[Received]] = {}
        self._waiting = [self.buckets.numel(b) for b in range(len(self.buckets))]
        self._new_sends = set(self._plan_now.backward_sends_new)
        self._backward_sent = False
        if self._profile is not None:  # per-tensor times feed the plan: the synchronizing clock
            self._ready_at = [0.0] * len(self._params)
            self._forward_started = self.clock()
            self._forward_seconds = 0.0
            self._last_mark: float | None = None
        if self._forward_timer is not None:
            self._forward_timer.take(0.0)  # drop what evaluation passes added
        self._send_current(self._plan_now.forward_sends)  # Case 1: during this forward pass

    def _on_forward_end(self) -> None:
        if self._plan_now is None or self._backward_sent:
            return  # an evaluation pass, or a second forward in one step
        self._backward_sent = True
        if self._profile is not None:
            now = self.clock()
            self._forward_seconds, self._last_mark = now - self._forward_started, now
        self._send_current(self._plan_now.backward_sends_current)  # Cases 2 and 3

    def _on_gradient(self, index: int) -> None:
        if self._plan_now is None:
            return
        if self._profile is not None:
            now = self.clock()
            self._ready_at[index] = now - (self._last_mark if self._last_mark is not None else now)
        grad = self._params[index].grad
        lo, hi = self._offsets[index], self._offsets[index + 1]
        if grad is not None:
            self._future.flat[lo:hi].add_(grad.reshape(-1))
        for bucket, count in self._overlaps[index]:
            self._waiting[bucket] -= count
            if self._waiting[bucket] == 0 and bucket in self._new_sends:
                self._new_sends.discard(bucket)
                with self._timer.span("in_backward"):
                    self._send(self._future, bucket, tag=NEW)
        if self._profile is not None:
            self._last_mark = self.clock()

    def _send_current(self, buckets: list[int]) -> None:
        """Start buckets of CUR; the loop counts this as forward time, so it is taken out."""
        with self._timer.span("in_forward"):
            for bucket in buckets:
                self._send(self._current, bucket, tag=CURRENT)

    def _send(self, gradient: _Gradient, bucket: int, *, tag: int) -> None:
        """Compress a bucket of ``gradient`` and hand its all-reduce to the communication
        thread; ``tag`` tells CUR's buckets from the new gradient's, which may share an index
        in one iteration."""
        assert self._plan_now is not None
        with self._timer.span("compress"):
            flat = gradient.flat[self.buckets.slice(bucket)]
            if self._profile is not None:
                self._local[self.buckets.slice(bucket)] = flat
            # A bucket is an element range of the flat gradient, compressed as one tensor.
            info = GroupInfo(name=bucket_name(bucket), step=self._step, epoch=self._epoch)
            slow = tag == CURRENT and bucket in self._plan_now.slow
            send = partial(self._issue, self._links[1 if slow else 0])
            self._launched_sends[2 * bucket + tag] = self.exchange(Bucket(bucket, flat, info), send)

    @staticmethod
    def _issue(
        link: QueuedCollective, bucket: Bucket, payload: Payload, ctx: Any
    ) -> Callable[[], Received]:
        """DeFT's ``Send``: the bucket's all-reduce on the link its plan gives it; the bucket
        of the gradient is where the sum is written."""
        return link.issue_all_reduce(payload)

    def step(self, *, step: int, epoch: int = 0, loss: Tensor | None = None) -> SyncStats:
        assert self._optimizer is not None and self._plan_now is not None, "attach(), begin()"
        plan = self._plan_now
        for bucket in sorted(self._new_sends):  # a bucket some of whose tensors got no gradient
            self._send(self._future, bucket, tag=NEW)
        newest_applied = plan.applied is not None and self._queues.iteration - 1 in plan.applied
        waited = self._timer.mark()
        numel, selected_count = self._settle()
        if plan.renewed and not newest_applied:
            self._carry_new_sends()
        for send in self._launched_sends.values():  # each bucket's completion, in plan order
            n, chosen = self._combine_into(send)
            numel, selected_count = numel + n, selected_count + chosen
        communicated = self._timer.mark()

        if self._profile is not None:
            self._observe(loss)
        finished = self._current
        if plan.renewed:  # the new gradient (with FUT) is now the one being synchronized
            self._current, self._future = self._future, self._current
        if plan.applied is not None:
            self._apply(self._current if newest_applied else finished, len(plan.applied))
        if plan.renewed:
            self._future.flat.zero_()
            self._starts(self._future)
        self._timer.add("comm", waited, communicated)
        self._timer.add("update", communicated, self._timer.mark())

        stats = self._stats(numel, selected_count)  # reads extra_metrics(): before the reset
        for link in self._links:
            count = link.take_bytes()
            stats.bytes_sent += count.payload
            stats.bytes_wire += count.wire
        self._plan_now = None
        if self._profile is not None:
            self._after_profiled_step(step)
        return replace(stats, bytes_dense=self.buckets.total * self._params[0].element_size())

    def _carry_new_sends(self) -> None:
        """Leave this step's sends of the new gradient in flight: it is applied steps later,
        so they may go on over the next forward pass, as DeFT's schedule has them (waiting
        here would hold the next forward back until the links are empty)."""
        for key in [key for key in self._launched_sends if key % 2 == NEW]:
            self._in_flight.append(self._launched_sends.pop(key))

    def _settle(self) -> tuple[int, int | Tensor]:
        """Wait for the sends left in flight and put their sums in place: elements, and
        elements selected."""
        numel = 0
        selected: int | Tensor = 0
        for send in self._in_flight:
            n, chosen = self._combine_into(send)
            numel, selected = numel + n, selected + chosen
        self._in_flight = []
        return numel, selected

    def _combine_into(self, send: Exchanged[Received]) -> tuple[int, int | Tensor]:
        """Wait for ``send`` to complete and write its sum over its bucket."""
        summed, selected = self.combined(send, send.wait())
        flat = send.bucket.gradient
        flat.copy_(summed)
        return flat.numel(), flat.numel() if selected is None else selected

    def flush(self) -> None:
        self._settle()

    def _starts(self, gradient: _Gradient) -> None:
        """``gradient`` is about to collect the next iteration's: note the weights it sees."""
        gradient.updates_at = self._updates
        if self._correction.remembers_weights:
            gradient.weights_at = self._weights()

    def _weights(self) -> Tensor:
        """The parameters, flat in the gradients' order."""
        return torch.cat([param.detach().reshape(-1) for param in self._params])

    def _apply(self, gradient: _Gradient, merged: int) -> None:
        assert self._optimizer is not None
        divisor = self.collective.world_size * (merged if self.merge_reduction == "mean" else 1)
        staleness = self._updates - gradient.updates_at
        now = self._weights() if self._correction.remembers_weights else None
        mean = self._correction.gradient(gradient.flat / divisor, now=now, then=gradient.weights_at)
        for i, param in enumerate(self._params):
            param.grad = mean[self._offsets[i] : self._offsets[i + 1]].view_as(param)
        self._correction.step(self._optimizer, staleness)
        self._updates += 1
        self._metrics["sched/applied_staleness"] = float(staleness)

    def extra_metrics(self) -> dict[str, float]:
        plan = self._plan_now
        assert plan is not None, "read within a step"
        current = self._queues.current
        return {
            **self._metrics,
            "sched/update_applied": float(plan.applied is not None),
            "sched/merged_iters": float(current.merged if current is not None else 1),
            "sched/delayed_buckets": float(len(current.unsent) if current is not None else 0),
            "sched/carried_buckets": float(len(self._in_flight)),
            **({"sched/second_link_buckets": float(len(plan.slow))} if self.links == 2 else {}),
        }

    # ---- profiling --------------------------------------------------------------------------
    def _observe(self, loss: Tensor | None) -> None:
        """The Preserver's samples: the averaged gradient's squared norm and how the workers'
        gradients spread along it."""
        profile = self._profile
        assert profile is not None
        n = self.collective.world_size
        mean = self._future.flat / n  # this step's gradient, all-reduced (not yet swapped)
        dot = float(mean.double() @ self._local.double())
        total, squares, loss_sum = self.collective.reduce_metrics(
            [dot, dot * dot, float(loss) if loss is not None else 0.0], device=mean.device
        )
        profile.norms.append(float(mean.double().square().sum()))
        profile.spreads.append(max(squares / n - (total / n) ** 2, 0.0))
        profile.loss = loss_sum / n
        weights = self._weights()  # this step's gradient was computed here (not yet stepped)
        if profile.previous is not None:
            before, then = profile.previous
            moved = float((weights - then).norm())
            if moved > 0:
                profile.curvatures.append(float((mean - before).norm()) / moved)
        profile.previous = (mean.clone(), weights)

    def _after_profiled_step(self, step: int) -> None:
        profile, timer = self._profile, self._forward_timer
        assert profile is not None and timer is not None
        forward = timer.take(self._forward_seconds)
        if step > 0 or profile.steps:  # the first step pays for warm-up: leave it out
            profile.forward = [a + b for a, b in zip(profile.forward, forward, strict=True)]
            profile.backward = [
                a + b for a, b in zip(profile.backward, self._ready_at, strict=True)
            ]
            profile.steps += 1
        if profile.steps >= self.profile_steps:
            self._plan_from_profile(profile)
            timer.remove()
            self._profile, self._forward_timer = None, None
            del self._local

    def _plan_from_profile(self, profile: _Profile) -> None:
        device = self._current.flat.device
        steps = profile.steps
        per_tensor = self.collective.reduce_metrics(
            [v / steps for v in (*profile.forward, *profile.backward)], device=device, op="max"
        )
        forward, backward = per_tensor[: len(self._sizes)], per_tensor[len(self._sizes) :]
        times = self._measure(self.buckets, forward, backward)
        smallest_window = sum(times.forward) / (times.mu if self.links == 2 else 1.0)
        refined = self.buckets.refine(times.comm, smallest_window)
        if refined != self.buckets:
            split = self._measure(refined, forward, backward)
            # Every piece pays a start-up: where that is most of a bucket's time (a small
            # model, latency-bound), splitting adds communication instead of fitting it in.
            if sum(split.comm) <= SPLIT_OVERHEAD * sum(times.comm):
                times = split
        walk = self._walk(profile)
        decision = self._preserve(times, walk, profile.loss)
        self._use_times(times, decision.capacity_scale)
        self._metrics["sched/preserver_ratio"] = decision.ratio
        if self.run_dir is not None and self.collective.rank == 0:
            times.write(self.run_dir / PROFILE_FILE)
        self._check_stability(profile)
        verdict = "passed" if decision.passed else f"outside 1 ± {self.epsilon}"
        log.info(
            f"deft: {len(self.buckets)} buckets, coverage rate {times.coverage_rate:.2f}, "
            f"mu {times.mu:.2f}; preserver ratio {decision.ratio:.4f} {verdict} after "
            f"{decision.retries} retries, capacity ×{decision.capacity_scale:.2f} (loss walk "
            f"from loss {profile.loss:.4g}: ‖g‖² {walk.mu:.4g}, σ {walk.sigma:.4g}, η {walk.eta:g})"
        )

    def _check_stability(self, profile: _Profile) -> None:
        """Say in the log when the planned staleness makes the run's lr and momentum unstable
        for the curvature the profiled steps measured (the Preserver models merged
        iterations, not stale ones). Every delayed update is one update late: the one before
        it lands while its gradient travels."""
        if not self.delay or not profile.curvatures:
            return
        assert self._optimizer is not None
        curvature = statistics.median(profile.curvatures)
        self._metrics["sched/curvature"] = curvature
        problem = self._correction.stability_problem(
            lr=float(self._optimizer.param_groups[0]["lr"]), staleness=1, curvature=curvature
        )
        if problem is not None:
            log.warning(f"deft: {problem}")

    def _measure(
        self, buckets: Buckets, forward: Sequence[float], backward: Sequence[float]
    ) -> BucketProfile:
        """Per-bucket F and B from the per-tensor times; C by timing an all-reduce of each
        bucket's size on the link (the slowest worker's)."""
        sizes = [buckets.numel(b) for b in range(len(buckets))]
        comm = self._time_all_reduces(self._links[0].inner, sizes)
        mu = self.given_mu or PAPER_MU
        if self.links == 2 and self.given_mu is None:
            slow = self._time_all_reduces(self._links[1].inner, sizes)
            mu = max(
                1.0, statistics.median(s / f for s, f in zip(slow, comm, strict=True) if f > 0)
            )
        return BucketProfile(
            bounds=buckets.bounds,
            forward=tuple(buckets.spread(forward, self._sizes)),
            backward=tuple(buckets.spread(backward, self._sizes)),
            comm=tuple(comm),
            mu=mu,
        )

    def _walk(self, profile: _Profile) -> LossWalk:
        """The loss walk in units of one worker's batch: only σ²/B matters, and
        Var(ḡ·g_w) = σ²/b."""
        assert self._optimizer is not None
        return LossWalk(
            mu=statistics.mean(profile.norms),
            sigma=math.sqrt(statistics.mean(profile.spreads)),
            eta=float(self._optimizer.param_groups[0]["lr"]),
        )

    def _preserve(self, times: BucketProfile, walk: LossWalk, loss: float) -> Decision:
        """How much the knapsacks are enlarged for the schedule to pass the Preserver."""
        n = self.collective.world_size

        def schedule_for(scale: float) -> tuple[list[int], int]:
            return steady_period(self._queues_for(times, scale), PRESERVER_HORIZON)

        if not self.delay:
            return Decision(capacity_scale=1.0, ratio=1.0, retries=0, passed=True)
        return preserve(
            schedule_for,
            walk,
            loss,
            n,
            epsilon=self.epsilon,
            retries=self.retries if self.use_preserver else 0,
        )

    def _time_all_reduces(
        self, link: Collective, sizes: Sequence[int], repeats: int = 3
    ) -> list[float]:
        """Seconds to all-reduce each size on ``link``: the median of ``repeats`` after a
        warm-up, the largest over workers. Equal sizes are timed once; the traffic is not
        counted."""
        device = self._current.flat.device
        seconds: dict[int, float] = {}
        for size in sorted(set(sizes)):
            payload = (torch.zeros(size, device=device),)
            seconds[size] = median_seconds(
                partial(link.all_reduce, payload), repeats=repeats, clock=self.clock
            )
        link.take_bytes()
        keys = sorted(seconds)
        agreed = self.collective.reduce_metrics([seconds[k] for k in keys], device=device, op="max")
        slowest = dict(zip(keys, agreed, strict=True))
        return [slowest[s] for s in sizes]

    # ---- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        self._settle()  # the buffers saved must hold every sum
        queues = self._queues
        return {
            **self.components_state(),
            "times": asdict(self.times) if self.times is not None else None,
            "capacity_scale": self._metrics.get("sched/capacity_scale", 1.0),
            "preserver_ratio": self._metrics.get("sched/preserver_ratio"),
            "queues": {
                "iteration": queues.iteration,
                "future": list(queues.future),
                "current": None
                if queues.current is None
                else {
                    "iterations": queues.current.iterations,
                    "unsent": sorted(queues.current.unsent),
                },
            },
            "current": self._current.flat.clone(),
            "future": self._future.flat.clone(),
            # How old each gradient is (and, for dc, the weights it was computed at): a
            # resumed job corrects its next update as the uninterrupted one does.
            "updates": self._updates,
            "started": [
                (g.updates_at, None if g.weights_at is None else g.weights_at.cpu().clone())
                for g in (self._current, self._future)
            ],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # A resumed job keeps its buckets and schedule (no new profiling), and what it had
        # merged but not yet applied.
        if state["times"] is not None:
            self._use_times(BucketProfile.from_dict(state["times"]), state["capacity_scale"])
            if state["preserver_ratio"] is not None:
                self._metrics["sched/preserver_ratio"] = state["preserver_ratio"]
            if self._forward_timer is not None:
                self._forward_timer.remove()
            self._profile, self._forward_timer = None, None
            q = state["queues"]
            self._queues.iteration, self._queues.future = q["iteration"], list(q["future"])
            if q["current"] is not None:
                current = q["current"]
                self._queues.current = Gradient(list(current["iterations"]), set(current["unsent"]))
        self.load_components_state(state)
        self._current.flat.copy_(state["current"])
        self._future.flat.copy_(state["future"])
        self._updates = state.get("updates", 0)  # a checkpoint from before corrections: 0
        for gradient, (updates_at, weights_at) in zip(
            (self._current, self._future), state.get("started", [(0, None)] * 2), strict=True
        ):
            gradient.updates_at = updates_at
            if weights_at is not None:
                gradient.weights_at = weights_at.to(gradient.flat.device)
