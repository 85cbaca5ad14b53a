"""What a compressor's selection costs on a cluster's machines, given instead of measured here:
neither a GPU's speed nor its ratio of top-k to compute is a CPU's. Torch-free."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SelectionCost:
    """Seconds a compressor takes to compress a group of d elements on the cluster's workers:
    ``d_log2_d·d·log2 d + per_element·d`` (the OMGS paper's top-k model is the first term; a
    threshold's scan, or a measured rate, the second)."""

    d_log2_d: float = 0.0
    per_element: float = 0.0

    def __post_init__(self) -> None:
        if not all(math.isfinite(v) and v >= 0 for v in (self.d_log2_d, self.per_element)):
            raise ValueError("a selection cost's coefficients must be finite and >= 0")
        if self.d_log2_d == 0 and self.per_element == 0:
            raise ValueError("a selection cost needs d_log2_d or per_element above 0")

    def seconds(self, elements: float) -> float:
        if elements <= 0:
            return 0.0
        log = math.log2(elements) if elements > 1 else 0.0
        return self.d_log2_d * elements * log + self.per_element * elements

    def describe(self) -> str:
        terms = [f"{self.d_log2_d:g}·d·log2 d"] if self.d_log2_d else []
        terms += [f"{self.per_element:g}·d"] if self.per_element else []
        return " + ".join(terms) + " s"
