"""OMGS merge rules on random instances of the paper's own cost model (drawn as
``merge_plans.random_instance`` does; docs/methods/schedulers/omgs.md), and how long the exact
planner takes on models with hundreds of tensors.

    .venv/bin/python -m benchmarks.merge_rules --write
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from benchmarks.report import Part, add_part_arguments, run_parts
from gradsync.algorithms.costs import CostModel
from gradsync.algorithms.merge_plans import (
    OMGS_RULES,
    iteration_seconds,
    no_merge,
    optimal_plan,
    random_instance,
    safe_rule,
)

INSTANCES = 3000
SEED = 2024


def rule_quality() -> str:
    rng = random.Random(SEED)
    worse_than_none = dict.fromkeys(OMGS_RULES, 0)
    not_optimal = dict.fromkeys(OMGS_RULES, 0)
    slowdown: dict[str, list[float]] = {name: [] for name in OMGS_RULES}
    for _ in range(INSTANCES):
        layers, cost = random_instance(rng, rng.randint(2, 9))
        lags = iteration_seconds(no_merge(layers), layers, cost)
        best = iteration_seconds(optimal_plan(layers, cost), layers, cost)
        for name, rule in OMGS_RULES.items():
            seconds = iteration_seconds(rule(layers, cost), layers, cost)
            worse_than_none[name] += seconds > lags * (1 + 1e-12)
            not_optimal[name] += seconds > best * (1 + 1e-12)
            slowdown[name].append(seconds / best)
    lines = [
        "| rule | slower than no merging | not optimal | mean / worst time vs optimal |",
        "|---|---:|---:|---:|",
    ]
    for name in OMGS_RULES:
        lines.append(
            f"| {name} | {worse_than_none[name] / INSTANCES:.1%} "
            f"({worse_than_none[name]}/{INSTANCES}) | {not_optimal[name] / INSTANCES:.1%} | "
            f"{statistics.mean(slowdown[name]):.3f} / {max(slowdown[name]):.2f} |"
        )
    return "\n".join(lines)


def planner_speed() -> str:
    lines = [
        "| tensors | α (s) | optimal plan (s) | groups | safe rule (s) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for count in (54, 161, 300):  # VGG-16, ResNet-50, hundreds
        for alpha in (1e-3, 1e-2):
            layers, cost = random_instance(random.Random(count), count)
            cost = CostModel(gamma=2e-9, alpha=alpha, beta=1e-8, density=0.001)
            start = time.perf_counter()
            plan = optimal_plan(layers, cost)
            optimal_s = time.perf_counter() - start
            start = time.perf_counter()
            safe_rule(layers, cost)
            safe_s = time.perf_counter() - start
            lines.append(f"| {count} | {alpha:g} | {optimal_s:.2f} | {len(plan)} | {safe_s:.2f} |")
    return "\n".join(lines)


PARTS = {
    "quality": Part(
        "OMGS merge rules on random instances",
        rule_quality,
        f"{INSTANCES} random instances of the paper's cost model (2-9 tensors, drawn as "
        "merge_plans.random_instance does), "
        "each rule against no merging (LAGS) and the exact optimum",
    ),
    "speed": Part(
        "Exact merge planner: time",
        planner_speed,
        "wall-clock seconds of one plan (γ = 2e-9, β = 1e-8, density 0.001; α = 1e-2 is the "
        "comm-bound case, where many groups are merged and the Pareto fronts are largest)",
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_part_arguments(parser, list(PARTS))
    run_parts(parser, parser.parse_args(), PARTS, "merge_rules")


if __name__ == "__main__":
    main()
