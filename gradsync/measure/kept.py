"""Kept profiles: what ``gradsync simulate`` measures of a bundled model on a host (its tensors'
sizes and forward, backward and update times, and what every compressor puts on the wire for
its real gradient), measured once and shipped with the package (``kept/NAME.json``, in the
format of ``--measurements``), so that simulating these jobs measures nothing here.

The times are those of the host that measured them, on its CPU, one thread (its cores and CPU
are in the file): a cluster description's compute replaces them, and only their shares among
the tensors, the sizes and the wire formats are used; without one, they stand for "what this
host would do" (``--remeasure`` measures this very host instead). A kept profile whose tensors
are no longer the model's (its code changed) is measured again, with one line saying so.

``python -m gradsync.cli.simulate_kept`` measures them again (after a change to a model or to
what a compressor sends), on an otherwise idle host.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gradsync.families import option_named
from gradsync.measure import measured
from gradsync.train.capacity import known_spec

KEPT = Path(__file__).with_name("kept")
"""The kept profiles (package data), one JSON file per ``KeptJob``."""


@dataclass(frozen=True)
class KeptJob:
    """A job whose measurements are kept: its file's name and the overrides that compose it."""

    name: str
    overrides: tuple[str, ...]


KEPT_JOBS = (
    # dataset=synthetic's own images (CIFAR's 32 px, 10 classes) at the default batch, 32.
    KeptJob("resnet50", ("model=resnet50", "dataset=synthetic")),
    KeptJob("resnet18", ("model=resnet18", "dataset=synthetic")),
    # The jobs whose GPU throughput the shipped clusters give (ImageNet's shapes for
    # ResNet-50; a batch of 128 for ResNet-18): the README's example is the first.
    KeptJob(
        "resnet50_224px_b64",
        (
            "model=resnet50",
            "dataset=synthetic",
            "dataset.image_shape=[3,224,224]",
            "dataset.num_classes=1000",
            "trainer.batch_size=64",
        ),
    ),
    KeptJob("resnet18_b128", ("model=resnet18", "dataset=synthetic", "trainer.batch_size=128")),
)
WORKER_COUNTS = (2, 4, 8)
"""The worker counts every compressor's wire format is kept for: the job's default two, and
the two a projection beyond eight workers extrapolates from (``wire.MAX_RECORDED_WORLD``)."""


@dataclass(frozen=True)
class Kept:
    """One kept file's measurements, and where and when they were taken."""

    measurements: measured.Measurements
    host: dict[str, Any]

    def describe(self) -> str:
        """``measured on an Intel Xeon ... (2 cores), torch 2.4.1, 2025-01-31``."""
        h = self.host
        return f"measured on {h.get('cpu', '?')} ({h.get('cores', '?')} cores), " + ", ".join(
            str(h[k]) for k in ("torch", "date") if k in h
        )


@dataclass
class KeptProfiles:
    """The kept measurements of ``directory``, each file read once it is asked for."""

    directory: Path = KEPT
    _read: dict[str, Kept] | None = field(default=None, repr=False)

    def of(self, key: str) -> Kept | None:
        """The kept measurements of the job whose profile key is ``key`` (``profile_key``)."""
        if self._read is None:
            self._read = {}
            for path in sorted(self.directory.glob("*.json")):
                kept = read(path)
                self._read.update(dict.fromkeys(kept.measurements.profiles, kept))
        return self._read.get(key)


def read(path: Path) -> Kept:
    """A kept file: the measurements ``measured.read`` takes, and the ``host`` it holds."""
    try:
        host = json.loads(path.read_text()).get("host", {})
    except (OSError, ValueError, AttributeError) as exc:
        raise ValueError(f"{path} is not a kept profile: {exc}") from None
    return Kept(measured.read(path), host if isinstance(host, dict) else {})


def write(path: Path, measurements: measured.Measurements) -> None:
    """``measurements`` (their profiles and wire formats: what a host's links and planning
    replays measured is this host's alone) as a kept file, with this host's description."""
    kept = measured.Measurements(profiles=measurements.profiles, wires=measurements.wires)
    measured.write(path, kept, extra={"host": this_host()})


def this_host() -> dict[str, Any]:
    """What the times of a profile taken here depend on: the CPU, its cores, torch."""
    import torch

    return {
        "cpu": _cpu_name(),
        "cores": os.cpu_count(),
        "torch": f"torch {torch.__version__}",
        "date": datetime.date.today().isoformat(),
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "an unknown CPU"


def model_option(cfg: DictConfig) -> str:
    """The ``model=`` option the composed job's model is (``families.option_named``)."""
    settings = OmegaConf.to_container(cfg.model, resolve=True)
    assert isinstance(settings, dict)
    named = {str(key): value for key, value in settings.items()}
    return option_named("model", named.get("_target_"), named)


def model_shapes(cfg: DictConfig) -> list[tuple[int, ...]] | None:
    """The shapes of the job's model's trained tensors, in model order, as its code builds it
    now (on the meta device: nothing allocated); None when its dataset's shapes are known only
    from its files."""
    import torch

    # Deferred for start-up: it imports torch, which this module's importers may not need.
    from gradsync.train.build import build_model

    spec = known_spec(cfg)
    if spec is None:
        return None
    torch.manual_seed(int(cfg.trainer.seed))
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = build_model(cfg, spec)
    return [tuple(p.shape) for p in model.parameters() if p.requires_grad]


def stale(cfg: DictConfig, kept_shapes: tuple[tuple[int, ...], ...]) -> str | None:
    """How the job's model no longer has the tensors its kept profile was measured on (one
    line), or None: it has them (or its shapes are known only from its data)."""
    now = model_shapes(cfg)
    if now is None or [tuple(s) for s in kept_shapes] == now:
        return None
    if len(now) != len(kept_shapes):
        return f"{len(kept_shapes)} tensors kept, {len(now)} now"
    index = next(i for i, (a, b) in enumerate(zip(kept_shapes, now, strict=True)) if a != b)
    was = "x".join(map(str, kept_shapes[index]))
    return f"tensor {index} is {'x'.join(map(str, now[index]))}, was {was}"


def say_stale(cfg: DictConfig, why: str) -> None:
    """The one line that a kept profile is measured again, on stderr."""
    print(
        f"gradsync: warning: the kept profile of model={model_option(cfg)} no longer matches "
        f"the model ({why}): measuring it here (python -m gradsync.cli.simulate_kept "
        "refreshes the kept one)",
        file=sys.stderr,
    )
