"""The compute of the workers' machines of a cluster this host is not: it replaces what was
measured here (``ModelProfile``), spread over the tensors as measured here. (What a
compressor's selection costs on them is ``selection.py``'s.) Torch-free."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gradsync.projection.estimates import ModelProfile


@dataclass(frozen=True)
class Compute:
    """One worker's compute per iteration at the job's batch size, as published or measured on
    the cluster: ``seconds`` of forward + backward + update together, or each of them, or a
    ``throughput`` of samples per second. The profile taken here spreads it over the model's
    tensors (and over the passes, when they are not given each)."""

    seconds: float | None = None
    forward: float | None = None
    backward: float | None = None
    update: float | None = None
    throughput: float | None = None
    """Samples per second of one worker, training."""

    def __post_init__(self) -> None:
        passes = (self.forward, self.backward, self.update)
        forms = [
            self.seconds is not None,
            any(p is not None for p in passes),
            self.throughput is not None,
        ]
        if sum(forms) != 1:
            raise ValueError(
                "give compute as one of: seconds; forward, backward and update; throughput"
            )
        if forms[1] and any(p is None for p in passes):
            raise ValueError("compute by pass needs all of forward, backward and update")
        given = [v for v in (self.seconds, *passes, self.throughput) if v is not None]
        finite = all(math.isfinite(v) and v >= 0 for v in given)
        if not finite or (self.throughput is not None and self.throughput <= 0):
            raise ValueError("compute times must be finite and >= 0, and a throughput > 0")

    def applied(self, profile: ModelProfile) -> tuple[ModelProfile, float]:
        """``profile`` on the cluster's machines, and how many times longer they compute than
        this host did (for what else is computed: combining, compressing). Loading is left
        out: this host's time to load a batch says nothing of the cluster's input pipeline,
        which a training job there keeps ahead of the steps."""
        if self.forward is not None and self.backward is not None and self.update is not None:
            target = self.forward + self.backward + self.update
            factor = target / profile.compute if profile.compute > 0 else 1.0
            on_cluster = replace(
                profile.with_passes(self.forward, self.backward), update=self.update, data=0.0
            )
            return on_cluster, factor
        if self.seconds is not None:
            target = self.seconds
        else:
            assert self.throughput is not None  # one of the three forms (__post_init__)
            target = profile.batch_size / self.throughput
        factor = target / profile.compute if profile.compute > 0 else 1.0
        return replace(profile.scaled(factor), data=0.0), factor

    def describe(self) -> str:
        if self.seconds is not None:
            return f"{self.seconds:g} s of compute per iteration"
        if self.throughput is not None:
            return f"{self.throughput:g} samples/s per worker"
        return f"forward {self.forward:g} s, backward {self.backward:g} s, update {self.update:g} s"
