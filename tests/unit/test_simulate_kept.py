"""``gradsync simulate`` as a newcomer first meets it: the README's command on a cluster shipped
with gradsync, from the kept profile (nothing measured here), its rows spread as the cluster
implies; a model without a kept profile measured under a progress bar; a kept profile whose
tensors are no longer the model's measured again, with one line; and the shipped clusters,
every number of which names its source."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from gradsync.cli import simulate
from gradsync.jobs.compose import ConfigError, compose_jobs
from gradsync.measure import kept, measured
from gradsync.measure.jobs import Predictor
from gradsync.measure.kept import KEPT_JOBS, KeptProfiles
from gradsync.measure.progress import Progress
from gradsync.projection.cluster_spec import (
    Described,
    JobShape,
    load,
    shipped_clusters,
)
from tests.helpers.doc_commands import commands

ROOT = Path(__file__).resolve().parents[2]
MEASURING = " measured here, "  # the progress bar's (``progress.BAR_FORMAT``)
CELL = re.compile(r"([\d.]+)x")


def _readme_simulate() -> list[str]:
    """The arguments of the README's ``gradsync simulate`` example."""
    found = [
        c.words for c in commands(ROOT / "README.md") if c.words[:2] == ("gradsync", "simulate")
    ]
    assert len(found) == 1, found
    return list(found[0][2:])


def _projection(out: str) -> dict[str, dict[int, float]]:
    """The projected speed-up of every pair by worker count (one link rate)."""
    lines = out.split("projected speed-up")[1].splitlines()[1:]
    header = lines[0].split("compressor × scheduler")[1].split()
    counts = [int(column.split("@")[0]) for column in header]
    table = {}
    for line in lines[1:]:
        cells = CELL.findall(line)
        if len(cells) != len(counts):
            break
        name = re.split(r"\s{2,}", line.strip())[0]
        table[name] = dict(zip(counts, map(float, cells), strict=True))
    return table


def test_the_readmes_command_predicts_from_the_kept_profile_and_spreads(capsys):
    assert simulate.main(_readme_simulate()) == 0
    captured = capsys.readouterr()
    assert MEASURING not in captured.err and "profiling" not in captured.err  # nothing measured
    assert "kept profile, measured on" in captured.out
    table = _projection(captured.out)
    assert set(table["none × wfbp"]) == {16, 64, 256}
    # The slow network (8 V100s a node over 25 Gbit/s, mixed precision): a dense exchange after
    # backward loses to DDP's pipelined one; from 64 workers on, a compressor that all-reduces
    # a little gains much, and top-k's all-gather, which grows with the workers, loses.
    assert all(speedup < 0.9 for speedup in table["none × allreduce"].values())
    assert table["powersgd × wfbp"][64] > 1.3 and table["powersgd × wfbp"][256] > 1.5
    assert table["topk × wfbp"][256] < table["topk × wfbp"][16]


def test_where_the_network_is_fast_every_pair_is_about_dense(capsys):
    """8 H200s a node, 400 Gbit/s a GPU: the exchange hides behind the compute, so no method
    gains (a compressor can only lose what it takes to compress)."""
    job = [
        "model=resnet50", "dataset=synthetic", "dataset.image_shape=[3,224,224]",
        "dataset.num_classes=1000", "trainer.batch_size=64", "trainer.precision=bf16",
    ]  # fmt: skip
    options = ["--cluster", "h200_8x_ndr400", "--workers", "16,64,256"]
    pairs = ["--compressors", "none,bf16,powersgd", "--schedulers", "allreduce,wfbp"]
    assert simulate.main([*job, *options, *pairs]) == 0
    captured = capsys.readouterr()
    assert MEASURING not in captured.err
    assert "2243 samples/s per worker for resnet50 at 3x224x224, batch 64, bf16" in (captured.out)
    table = _projection(captured.out)
    assert all(0.9 <= s <= 1.02 for row in table.values() for s in row.values()), table


def test_a_model_without_a_kept_profile_is_measured_under_a_progress_bar(tmp_path, capsys):
    """...and a kept profile measured so (the refresh's own path) whose tensors the model no
    longer has is measured again, with one line; as it is, it is taken with nothing measured."""
    store = tmp_path / "measured.json"
    job = ["model=mlp", "--compressors", "none", "--schedulers", "allreduce", "--compute", "0.01"]
    assert simulate.main([*job, "--measurements", str(store)]) == 0
    err = capsys.readouterr().err
    assert "profiling model=mlp at batch 32 on cpu (0 measured here, 00:00)" in err
    assert "what compressor=none sends among 2 workers (1 measured here" in err

    directory = tmp_path / "kept"
    directory.mkdir()
    path = directory / "mlp.json"
    kept.write(path, measured.read(store))
    (cfg,) = compose_jobs(["model=mlp"], multirun=False, launcher_here=False, machine=False)
    taken = Predictor(kept=KeptProfiles(directory), progress=(quiet := Progress(io.StringIO())))
    taken.wire(cfg, "none", 2)
    assert quiet.count == 0 and taken.kept_for(cfg) is not None

    document = json.loads(path.read_text())
    document["profiles"][0]["layer_shapes"][0][0] += 1  # the model's first tensor changed
    path.write_text(json.dumps(document))
    again = Predictor(kept=KeptProfiles(directory), progress=(bar := Progress(io.StringIO())))
    profiled = again.profiled(cfg)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "the kept profile of model=mlp no longer matches" in lines[0]
    assert "tensor 0 is" in lines[0]
    assert bar.count == 1 and profiled.gradient is not None and again.kept_for(cfg) is None


@pytest.mark.parametrize("job", KEPT_JOBS, ids=lambda job: job.name)
def test_every_kept_job_is_kept_for_the_job_it_composes(job):
    """A default changed since the profiles were kept would leave them unused: every call
    would profile (minutes) where it should not."""
    (cfg,) = compose_jobs(list(job.overrides), multirun=False, launcher_here=False, machine=False)
    predictor = Predictor(kept=KeptProfiles(), progress=(bar := Progress(io.StringIO())))
    predictor.profiled(cfg)
    assert predictor.kept_for(cfg) is not None and bar.count == 0


# ---- the shipped clusters ---------------------------------------------------------------
SHIPPED = shipped_clusters()
NUMBER = re.compile(r"\d")


def _unsourced(text: str) -> list[str]:
    """The lines of a cluster file with a number and no source: no comment on the line, nor
    right above it, nor above the key or the run of list entries it is in."""
    unsourced, sourced_above = [], False
    for line in text.splitlines():
        code = line.split("#", 1)[0]
        if not code.strip():
            sourced_above = line.strip().startswith("#")
            continue
        sourced = "#" in line or sourced_above
        if NUMBER.search(code) and not sourced:
            unsourced.append(line)
        # A comment above a key (`models:`) or a list's first entry is the source of its entries.
        sourced_above = sourced and (not NUMBER.search(code) or code.lstrip().startswith("- "))
    return unsourced


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_cluster_loads_and_names_the_source_of_every_number(name):
    path = SHIPPED[name]
    described = Described(load(path, []), path)
    assert described.spec.workers is not None and described.spec.bandwidth is not None
    assert _unsourced(path.read_text()) == []
    assert described.compute() is not None or described.spec.models


def test_a_numbers_source_is_checked():
    assert _unsourced("# the paper\nworkers: 16\nbandwidth: 1gbit\n") == ["bandwidth: 1gbit"]
    assert _unsourced("# fits\nall_gather:\n  - {alpha: 1}\n") == []
    assert _unsourced("compute:\n  seconds: 0.18\n") == ["  seconds: 0.18"]
    assert _unsourced("models:\n  # a figure\n  - {throughput: 2}\n  - {throughput: 3}\n") == []
    assert _unsourced("workers: 16  # two nodes\n") == []


def test_a_shipped_cluster_is_named_and_listed_by_the_help():
    parsed = simulate._parser().parse(["--cluster", "h200_8x_ndr400"])
    assert parsed is not None and parsed.cluster == SHIPPED["h200_8x_ndr400"]
    assert "h200_8x_ndr400" in simulate._help() and "v100_8x_25gbe" in simulate._help()
    with pytest.raises(ConfigError, match=r"the name of a shipped one: .*h200_8x_ndr400"):
        simulate._parser().parse(["--cluster", "h100"])


def test_the_compute_of_the_job_is_the_entry_for_it():
    described = Described(load(SHIPPED["h200_8x_ndr400"], []))
    models = ["resnet50", "resnet18"]
    imagenet = JobShape("resnet50", (3, 224, 224), 64, "bf16")
    compute, entry = described.compute_for(imagenet, models)
    assert compute is not None and compute.throughput == 2243 and entry is not None
    cifar = JobShape("resnet50", (3, 32, 32), 64, "fp32")
    assert described.compute_for(cifar, models) == (None, None)
    problem = described.unknown_speed(cifar)
    assert problem is not None and "--throughput" in problem and "3x32x32" in problem


@pytest.mark.parametrize(
    ("entries", "problem"),
    [
        ("- {model: resnet50}", "models[0]: give its compute"),
        ("- {model: resnet50, seconds: 1, throughput: 2}", "models[0]: give compute as one of"),
        ("- {model: resnet50, seconds: 1}\n  - {model: resnet50, seconds: 2}", "is for the same"),
        ("- {model: resnet50, precision: fp8, seconds: 1}", "unknown models[0].precision 'fp8'"),
        ("- {model: resnet50, batch_size: 0, seconds: 1}", "models[0].batch_size must be in"),
    ],
    ids=["no-compute", "two-forms", "twice", "precision", "batch"],
)
def test_a_models_entry_that_cannot_price_a_job_is_one_line_naming_it(tmp_path, entries, problem):
    path = tmp_path / "cluster.yaml"
    path.write_text(f"models:\n  {entries}\n")
    with pytest.raises(ValueError, match=re.escape(problem)) as error:
        load(path, [])
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_a_job_the_cluster_has_no_speed_for_is_refused_before_anything_is_measured(capsys):
    job = ["model=resnet50", "dataset=synthetic", "--cluster", "h200_8x_ndr400"]
    assert simulate.main([*job, "--compressors", "none", "--schedulers", "allreduce"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gradsync: error: ") and len(err.strip().splitlines()) == 1
    assert "not for this job (resnet50 at 3x32x32, batch 32, fp32)" in err
