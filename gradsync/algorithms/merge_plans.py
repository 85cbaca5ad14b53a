"""Which consecutive tensors to merge into one communication group: the timeline model of
eqs. (4)–(9), the paper's, the official code's and a safe OMGS rule, threshold merging (MGS), and
an exact planner (docs/methods/schedulers/omgs.md, "How it works").

Layers are given in **backward order** (index 0 is the output layer, whose gradient is ready
first). A plan is a tuple of group lengths in that order: ``(2, 1)`` on three layers sends the
output layer and the one below it together, then the input layer alone. All functions here are
pure: (per-layer backward times, sizes, cost model) in, plan or times out.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gradsync.algorithms.costs import CostModel

Plan = tuple[int, ...]


@dataclass(frozen=True)
class Layers:
    backward: tuple[float, ...]
    """Seconds of backward computation of each layer, output layer first."""
    sizes: tuple[int, ...]
    """Elements of each layer, in the same order."""

    def __post_init__(self) -> None:
        if len(self.backward) != len(self.sizes) or not self.sizes:
            raise ValueError("Layers needs one backward time per size, and at least one layer")

    def __len__(self) -> int:
        return len(self.sizes)


@dataclass(frozen=True)
class GroupTimes:
    backward_start: float  # τ_b of the group's first (output-most) layer
    select_start: float  # τ_s: when the group's last gradient is ready
    select: float  # t_s
    comm_start: float  # τ_c
    comm: float  # t_c


def groups_of(plan: Plan) -> list[range]:
    """The layer indices of each group."""
    starts = [0, *itertools.accumulate(plan)]
    return [range(a, b) for a, b in itertools.pairwise(starts)]


def check_plan(plan: Plan, layers: int) -> None:
    if any(g < 1 for g in plan) or sum(plan) != layers:
        raise ValueError(f"plan {plan} does not split {layers} layers into contiguous groups")


def timeline(
    plan: Plan,
    layers: Layers,
    cost: CostModel,
    after: CostModel | None = None,
    after_share: float = 1.0,
) -> list[GroupTimes]:
    """Eqs. (5)–(8) for merged layers: a group's layers run backward back to back, its
    selection follows on the compute stream, and its exchange starts when both the selection
    and the previous exchange have finished. ``after``: the costs of an exchange that starts
    once the compute stream has finished, when they differ from ``cost``'s (calls on idle
    cores of a shared host); with ``after_share`` < 1, once that share of it has (the
    stream is the slowest worker's, and the cores fall idle when the others finish)."""
    check_plan(plan, len(layers))
    groups = groups_of(plan)
    elements = [sum(layers.sizes[i] for i in group) for group in groups]
    compute_end = math.inf  # without ``after``, every exchange is priced by ``cost``
    if after is not None:
        busy = sum(layers.backward) + sum(cost.group_seconds(d) for d in elements)
        compute_end = after_share * busy
    compute = comm_free = 0.0
    times = []
    for group, d in zip(groups, elements, strict=True):
        start = compute
        ready = start + sum(layers.backward[i] for i in group)
        select = cost.group_seconds(d)
        compute = ready + select
        comm_start = max(compute, comm_free)
        priced = after if after is not None and comm_start >= compute_end else cost
        comm = priced.comm_seconds(d)
        comm_free = comm_start + comm
        times.append(GroupTimes(start, ready, select, comm_start, comm))
    return times


def iteration_seconds(
    plan: Plan,
    layers: Layers,
    cost: CostModel,
    forward: float = 0.0,
    after: CostModel | None = None,
    after_share: float = 1.0,
) -> float:
    """``t_iter = t_f + τ_c[1] + t_c[1]``: the end of the last exchange (``after`` and
    ``after_share`` as in ``timeline``)."""
    last = timeline(plan, layers, cost, after, after_share)[-1]
    return forward + last.comm_start + last.comm


def exposed_comm_seconds(plan: Plan, layers: Layers, cost: CostModel) -> float:
    """Eq. (9), sign corrected: the communication left after the compute stream has finished."""
    times = timeline(plan, layers, cost)
    last = times[-1]
    return last.comm_start + last.comm - (last.select_start + last.select)


# ---- plans that need no model --------------------------------------------------------------
def no_merge(layers: Layers, cost: CostModel | None = None) -> Plan:
    """LAGS-SGD: every tensor its own group. (Every planner takes the cost model.)"""
    return (1,) * len(layers)


def single_group(layers: Layers, cost: CostModel | None = None) -> Plan:
    """TopK-SGD: one group, exchanged after backward (eq. 4)."""
    return (len(layers),)


def threshold_groups(sizes: Sequence[int], threshold: int) -> Plan:
    """MGS-SGD (the official code's grouping): walk from the output layer adding sizes and close
    a group once it holds at least ``threshold`` elements; the rest forms the last group."""
    plan, count, total = [], 0, 0
    for size in sizes:
        count, total = count + 1, total + size
        if total >= threshold:
            plan.append(count)
            count, total = 0, 0
    if count:
        plan.append(count)
    return tuple(plan)


# ---- OMGS rules -------------------------------------------------------------------------------
def _merged(plan: list[int], group: int) -> list[int]:
    """``plan`` with group ``group`` merged into the one after it (towards the input)."""
    return [*plan[:group], plan[group] + plan[group + 1], *plan[group + 2 :]]


def _group_sizes(plan: Sequence[int], layers: Layers) -> tuple[list[float], list[int]]:
    groups = groups_of(tuple(plan))
    backward = [sum(layers.backward[i] for i in g) for g in groups]
    return backward, [sum(layers.sizes[i] for i in g) for g in groups]


def _scan(layers: Layers, cost: CostModel, accept: Callable[[list[int], int], bool]) -> Plan:
    """The backward scan of Algorithm 1: for each layer from the output side, decide whether it
    joins the layer below it, re-timing the whole plan after every merge (cheap), not only
    the layers the paper's Algorithm 1 re-times (docs/methods/schedulers/omgs.md, "Where
    gradsync differs from the paper")."""
    plan = [1] * len(layers)
    group = 0
    while group < len(plan) - 1:
        if accept(plan, group):
            plan = _merged(plan, group)  # the merged group is considered again with the next
        else:
            group += 1
    return tuple(plan)


def _paper_test(layers: Layers, cost: CostModel) -> Callable[[list[int], int], bool]:
    def accept(plan: list[int], g: int) -> bool:
        times = timeline(tuple(plan), layers, cost)
        backward, sizes = _group_sizes(plan, layers)
        u = times[g].backward_start + backward[g] + backward[g + 1]
        select_apart = cost.group_seconds(sizes[g]) + cost.group_seconds(sizes[g + 1])
        q3 = u + select_apart < times[g].comm_start + cost.comm_seconds(sizes[g])
        q5 = times[g].comm_start + cost.alpha > u + cost.group_seconds(sizes[g] + sizes[g + 1])
        return q3 and q5

    return accept


def paper_rule(layers: Layers, cost: CostModel) -> Plan:
    """OMGS as published: merge layer l into l−1 when Q3 ∧ Q5 (eq. 24)."""
    return _scan(layers, cost, _paper_test(layers, cost))


def code_rule(layers: Layers, cost: CostModel) -> Plan:
    """OMGS as the official code does it: the output layer always joins the next one, then
    merge when ``tw < tsave`` (Q5 loosened by TKPM(d[l−1]), no Q3)."""

    def accept(plan: list[int], g: int) -> bool:
        if g == 0 and plan[0] == 1:
            return True  # the off-by-one forced merge of the last two tensors
        times = timeline(tuple(plan), layers, cost)
        backward, sizes = _group_sizes(plan, layers)
        a, b = sizes[g], sizes[g + 1]
        idle = times[g].comm_start - (times[g].select_start + times[g].select)
        tw = (
            backward[g + 1]
            + cost.group_seconds(a + b)
            - cost.group_seconds(a)
            - cost.group_seconds(b)
            - idle
        )
        tsave = cost.comm_seconds(a) + cost.comm_seconds(b) - cost.comm_seconds(a + b)
        return tw < tsave

    return _scan(layers, cost, accept) if len(layers) > 1 else (1,)


def safe_rule(layers: Layers, cost: CostModel) -> Plan:
    """The same scan, accepting a merge only when the modelled iteration gets shorter: never
    worse than no merging."""

    def accept(plan: list[int], g: int) -> bool:
        before = iteration_seconds(tuple(plan), layers, cost)
        return iteration_seconds(tuple(_merged(plan, g)), layers, cost) < before

    return _scan(layers, cost, accept)


def optimal_plan(layers: Layers, cost: CostModel) -> Plan:
    """The plan with the shortest modelled iteration, exactly.

    Dynamic programme over group boundaries. After the groups covering layers [0, j) the
    future depends only on (compute-stream free time, link free time), so each boundary j keeps
    the Pareto front of those pairs; a pair that is no better in both is dropped. Pairs that
    cannot beat the best heuristic plan even in the most favourable future (all remaining
    backward on the compute stream, all remaining bytes on the link) are dropped too. The best
    plan is the minimum link time at j = L. Each boundary's candidates are handled as arrays.
    """
    count = len(layers)
    prefix_b = np.concatenate([[0.0], np.cumsum(layers.backward)])
    prefix_d = [0, *itertools.accumulate(layers.sizes)]
    heuristics = (safe_rule(layers, cost), no_merge(layers), single_group(layers))
    bound = min(iteration_seconds(p, layers, cost) for p in heuristics) * (1 + 1e-12)
    rest_comm = [cost.min_comm_seconds(prefix_d[count] - d) for d in prefix_d]

    # Every front's states, concatenated: compute, link, boundary it ends at, predecessor row.
    compute, link = np.zeros(1), np.zeros(1)
    boundary, parent = np.zeros(1, dtype=np.int64), np.full(1, -1, dtype=np.int64)
    for j in range(1, count + 1):
        groups = [prefix_d[j] - prefix_d[i] for i in range(j)]
        work = np.array(
            [prefix_b[j] - prefix_b[i] + cost.group_seconds(d) for i, d in enumerate(groups)]
        )
        comm = np.array([cost.comm_seconds(d) for d in groups])
        rows = np.flatnonzero(boundary < j)
        done = compute[rows] + work[boundary[rows]]
        end = np.maximum(done, link[rows]) + comm[boundary[rows]]
        if j < count:  # the most favourable future must still beat the best known plan
            finish = np.maximum(
                end + rest_comm[j], done + (prefix_b[count] - prefix_b[j]) + cost.alpha
            )
            keep = finish <= bound
            rows, done, end = rows[keep], done[keep], end[keep]
        order = np.lexsort((end, done))  # by compute, then link
        done, end, rows = done[order], end[order], rows[order]
        front = end < np.minimum.accumulate(np.concatenate([[np.inf], end[:-1]]))
        compute = np.concatenate([compute, done[front]])
        link = np.concatenate([link, end[front]])
        boundary = np.concatenate([boundary, np.full(int(front.sum()), j)])
        parent = np.concatenate([parent, rows[front]])
    finals = np.flatnonzero(boundary == count)
    row = int(finals[np.argmin(link[finals])])
    cuts = []
    while row > 0:
        cuts.append(int(boundary[row]))
        row = int(parent[row])
    cuts.append(0)
    return tuple(b - a for a, b in itertools.pairwise(reversed(cuts)))


def brute_force_plan(layers: Layers, cost: CostModel) -> Plan:
    """All 2^(L−1) plans: the test oracle for ``optimal_plan`` (L ≤ 12 or so)."""
    count = len(layers)
    best: tuple[float, Plan] | None = None
    for cuts in itertools.product((False, True), repeat=count - 1):
        plan, length = [], 1
        for cut in cuts:
            if cut:
                plan.append(length)
                length = 1
            else:
                length += 1
        plan.append(length)
        seconds = iteration_seconds(tuple(plan), layers, cost)
        if best is None or seconds < best[0]:
            best = (seconds, tuple(plan))
    assert best is not None
    return best[1]


OMGS_RULES: dict[str, Callable[[Layers, CostModel], Plan]] = {  # names: pipelined/config.py
    "paper": paper_rule,
    "code": code_rule,
    "safe": safe_rule,
    "optimal": optimal_plan,
}


def random_instance(
    rng: random.Random, layers: int, densities: Sequence[float] = (0.001,)
) -> tuple[Layers, CostModel]:
    """A random instance of the paper's cost model: γ ∈ {2.2e-10, 2e-9, 2e-8}, α ∈ {1e-4,
    1e-3, 1e-2}, β ∈ {1e-9, 1e-8, 1e-7}, sizes log-uniform in [64, 4M], 0.1-5 ms of backward a
    tensor. For tests and benchmarks of the rules (docs/methods/schedulers/omgs.md, "Published
    claim and what gradsync measured")."""
    instance = Layers(
        backward=tuple(rng.uniform(1e-4, 5e-3) for _ in range(layers)),
        sizes=tuple(int(2 ** rng.uniform(6, 22)) for _ in range(layers)),
    )
    cost = CostModel(
        gamma=rng.choice([2.2e-10, 2e-9, 2e-8]),
        alpha=rng.choice([1e-4, 1e-3, 1e-2]),
        beta=rng.choice([1e-9, 1e-8, 1e-7]),
        density=rng.choice(list(densities)),
    )
    return instance, cost
