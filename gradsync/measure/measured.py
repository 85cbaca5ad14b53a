"""What a ``Predictor`` measured on this host (profiles, wire formats, link probes, in-place
cost fits), written to
and read from a JSON file: a prediction made later, or elsewhere, can then start from the
measurements taken when its runs were made instead of from this host's speed of the moment.

The profiled gradient (megabytes of floats) is not kept; a wire format that was not measured
before the file was written is measured on a gradient taken afresh."""

from __future__ import annotations

import json
from collections.abc import Hashable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gradsync.measure.profile import ProfiledJob, SharedHostDelays
from gradsync.projection.estimates import LENGTHS, ModelProfile, Wire

FORMAT = 2  # 2: a ragged all-gather's lengths are a call of their own
READABLE = (1, 2)  # 1: every all-gather was priced after a gather of its lengths


Key = tuple[Hashable, ...]


@dataclass
class Measurements:
    """Everything measured for predictions, each keyed by what it depends on."""

    profiles: dict[str, ProfiledJob] = field(default_factory=dict)
    wires: dict[Key, Wire] = field(default_factory=dict)
    delays: dict[Key, SharedHostDelays] = field(default_factory=dict)
    fits: dict[Key, dict[str, float]] = field(default_factory=dict)
    """The cost models jobs fit in place on this host (``planning.py``)."""

    def update(self, other: Measurements) -> None:
        for name in ("profiles", "wires", "delays", "fits"):
            getattr(self, name).update(getattr(other, name))


def write(path: Path, measurements: Measurements, extra: dict[str, Any] | None = None) -> None:
    """``measurements`` to ``path``, replaced whole (never half written); ``extra``: more keys
    of the document (what a kept profile says of its host), which ``read`` leaves."""
    document = {
        "format": FORMAT,
        **(extra or {}),
        "profiles": [
            {
                "key": key,
                "profile": asdict(job.profile),
                "layer_sizes": list(job.layer_sizes),
                "layer_shapes": [list(shape) for shape in job.layer_shapes],
            }
            for key, job in measurements.profiles.items()
        ],
        "wires": [{"key": list(k), "wire": _stored(w)} for k, w in measurements.wires.items()],
        "delays": [{"key": list(k), "delays": asdict(d)} for k, d in measurements.delays.items()],
        "fits": [{"key": list(k), "fit": fit} for k, fit in measurements.fits.items()],
    }
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(document, indent=1) + "\n")
    partial.replace(path)


def read(path: Path) -> Measurements:
    """What ``write`` saved; ValueError when the file is not such a file."""
    try:
        document = json.loads(path.read_text())
        version = document.get("format")
        if version not in READABLE:
            raise ValueError(f"format {version!r}, expected one of {READABLE}")
        return Measurements(
            profiles={
                entry["key"]: ProfiledJob(
                    profile=_profile(entry["profile"]),
                    gradient=None,
                    layer_shapes=_shapes(entry),
                )
                for entry in document["profiles"]
            },
            wires={tuple(e["key"]): _wire(e["wire"], version) for e in document["wires"]},
            delays={tuple(e["key"]): SharedHostDelays(**e["delays"]) for e in document["delays"]},
            fits={tuple(e["key"]): dict(e["fit"]) for e in document["fits"]},
        )
    except (OSError, KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"{path} is not a file of saved measurements: {exc}") from None


def _stored(wire: Wire) -> dict[str, Any]:
    """A wire format as measured here: a cluster's selection cost is applied on use, never
    kept."""
    fields = asdict(wire)
    del fields["selection"]
    return fields


def _profile(fields: dict[str, Any]) -> ModelProfile:
    tuples = {k: tuple(fields[k]) for k in ("sizes", "forward", "backward")}
    return ModelProfile(**{**fields, **tuples})


def _wire(fields: dict[str, Any], version: int) -> Wire:
    calls: list[tuple[str, float]] = []
    for kind, rate in fields["calls"]:
        if version == 1 and kind == "all_gather":  # as format 1 priced it
            calls.append((LENGTHS, 0.0))
        calls.append((kind, rate))
    return Wire(**{**fields, "calls": tuple(calls)})


def _shapes(entry: dict[str, Any]) -> tuple[tuple[int, ...], ...]:
    """The tensors' shapes; a file written before shapes were kept has each one's size."""
    if "layer_shapes" in entry:
        return tuple(tuple(shape) for shape in entry["layer_shapes"])
    return tuple((size,) for size in entry["layer_sizes"])
