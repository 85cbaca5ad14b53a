"""Saved measurements (``measure/measured.py``): what is written is read back the same, and
a file that is not such a file is refused in one line."""

from __future__ import annotations

import json

import pytest

from gradsync.measure.measured import Measurements, read, write
from gradsync.measure.profile import ProfiledJob, SharedHostDelays
from gradsync.projection.estimates import LENGTHS, ModelProfile, Wire

PROFILE = ModelProfile(
    model="Net", sizes=(10, 30), forward=(0.001, 0.002), backward=(0.003, 0.004),
    update=0.0005, data=0.0001, batch_size=32, element_bytes=4,
)  # fmt: skip
WIRE = Wire(
    compressor="topk", numel=40, calls=(("all_gather", 0.08), ("broadcast", 0.01)),
    compress_seconds=0.002, density=0.01, combine_seconds=0.001, workers=4,
)  # fmt: skip
DELAYS = SharedHostDelays(
    sync=0.02,
    calls={"all_reduce": 0.003},
    overlapped_calls={"all_reduce": 0.001},
    busy_link_slowdown={"link 1": 1.2, "link 1+link 2": 1.5},
    second_link_mu=1.8,
)


def test_measurements_are_read_back_as_written_without_the_gradient(tmp_path):
    saved = Measurements(
        profiles={
            "model: net\n": ProfiledJob(PROFILE, gradient=None, layer_shapes=((3, 10), (10,)))
        },
        wires={("model: net\n", "density: 0.01\n", 4): WIRE},
        delays={("model: net\n", "runner: netem\n", 4): DELAYS},
        fits={("model: net\n", "topk", "netem", 4, 5): {"gamma": 1e-7, "alpha": 0.03, "beta": 0}},
    )
    path = tmp_path / "measured.json"
    write(path, saved)
    assert read(path) == saved
    assert [p.name for p in tmp_path.iterdir()] == ["measured.json"]  # nothing half written


def test_a_file_that_is_not_saved_measurements_is_refused_in_one_line(tmp_path):
    path = tmp_path / "measured.json"
    for text in ("{not json", '{"format": 99}', '{"format": 1, "profiles": []}'):
        path.write_text(text)
        with pytest.raises(ValueError, match=r"is not a file of saved measurements: .+"):
            read(path)


def test_a_format_1_file_prices_every_all_gather_after_a_gather_of_its_lengths(tmp_path):
    """Format 1 recorded no lengths call and priced one before every all-gather; read back,
    its wires say so, so old saved measurements predict what they predicted."""
    path = tmp_path / "measured.json"
    write(path, Measurements(profiles={}, wires={("k",): WIRE}, delays={}, fits={}))
    document = json.loads(path.read_text())
    document["format"] = 1
    path.write_text(json.dumps(document))
    calls = read(path).wires[("k",)].calls
    assert calls == ((LENGTHS, 0.0), ("all_gather", 0.08), ("broadcast", 0.01))


def test_a_file_written_before_shapes_were_kept_reads_each_size_as_a_1d_shape(tmp_path):
    path = tmp_path / "measured.json"
    job = ProfiledJob(PROFILE, gradient=None, layer_shapes=((3, 10), (10,)))
    write(path, Measurements(profiles={"k": job}, wires={}, delays={}, fits={}))
    document = json.loads(path.read_text())
    del document["profiles"][0]["layer_shapes"]
    path.write_text(json.dumps(document))
    read_back = read(path).profiles["k"]
    assert read_back.layer_shapes == ((30,), (10,))
    assert read_back.layer_sizes == job.layer_sizes
