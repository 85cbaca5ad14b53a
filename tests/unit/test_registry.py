"""The scheduler registry is the one list of schedulers: what Hydra offers, what the config checks
refuse, what ``gradsync simulate`` prices. Every test here runs over the registry, so a new
entry is covered without an edit to this file."""

from __future__ import annotations

import ast
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

import gradsync
from gradsync import families
from gradsync.compressors.none import NoneCompressor
from gradsync.feedback.none import NoneFeedback
from gradsync.jobs.compose import CONFIG_MODULE, ConfigError, check_config
from gradsync.jobs.discovery import group_options
from gradsync.measure.wire import measure_wire
from gradsync.projection.cluster import Cluster
from gradsync.projection.estimates import Job, ModelProfile, Wire
from gradsync.schedulers.costs import predict
from gradsync.schedulers.registry import SCHEDULERS, baseline_spec, spec_of

NAMES = list(SCHEDULERS)
SOURCE = Path(gradsync.__file__).parent
# Defaults that several modules used to restate: each numeric literal may appear once.
DEFAULTS = (1_000_000, 4_000_000, 6_500_000, 65_536, 8192, 1.65, 25.0)


def _compose(*overrides: str):
    families.register()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


def test_hydra_offers_exactly_the_registered_schedulers():
    assert group_options()["scheduler"] == sorted(SCHEDULERS)


@pytest.mark.parametrize("name", NAMES)
def test_each_option_composes_to_its_typed_options(name):
    spec = SCHEDULERS[name]
    cfg = _compose(f"scheduler={name}", f"trainer.servers={spec.capabilities.servers or 1}")
    assert OmegaConf.get_type(cfg.scheduler) is spec.config
    assert spec_of(cfg.scheduler) is spec
    check_config(cfg, launcher_here=False, machine=False)


@pytest.mark.parametrize("name", [n for n in NAMES if SCHEDULERS[n].capabilities.allreduces])
def test_schedulers_that_sum_payloads_refuse_payloads_that_do_not_add_up(name):
    cfg = _compose(f"scheduler={name}", "compressor=topk", "compressor.exchange=allgather")
    with pytest.raises(ConfigError, match=f"scheduler={name} all-reduces, but compressor=topk"):
        check_config(cfg, launcher_here=False, machine=False)
    union = _compose(f"scheduler={name}", "compressor=topk", "compressor.exchange=union")
    check_config(union, launcher_here=False, machine=False)


@pytest.mark.parametrize("name", [n for n in NAMES if SCHEDULERS[n].capabilities.dense_only])
def test_dense_only_schedulers_refuse_compression(name):
    cfg = _compose(f"scheduler={name}", "compressor=topk")
    with pytest.raises(ConfigError, match=f"scheduler={name} synchronizes dense layers"):
        check_config(cfg, launcher_here=False, machine=False)


@pytest.mark.parametrize("name", NAMES)
def test_the_devices_a_scheduler_takes_are_the_ones_its_entry_lists(name, monkeypatch):
    """The check reads the entry: a scheduler that lists cuda is taken on it, and the same
    scheduler without cuda in its entry is refused, in one line that says which device to use."""
    spec = SCHEDULERS[name]
    cfg = _compose(f"scheduler={name}", "trainer.device=cuda")
    if "cuda" in spec.capabilities.devices:
        check_config(cfg, launcher_here=False, machine=False)
    cpu_only = replace(spec, capabilities=replace(spec.capabilities, devices=("cpu",)))
    monkeypatch.setitem(SCHEDULERS, name, cpu_only)
    refusal = f"^scheduler={name} runs on cpu only, not cuda; use trainer.device=cpu$"
    with pytest.raises(ConfigError, match=refusal):
        check_config(cfg, launcher_here=False, machine=False)


@pytest.mark.parametrize("name", [n for n in NAMES if not SCHEDULERS[n].capabilities.resumable])
def test_schedulers_that_cannot_resume_say_so(name, tmp_path):
    servers = SCHEDULERS[name].capabilities.servers or 1
    cfg = _compose(f"scheduler={name}", f"trainer.servers={servers}", f"trainer.resume={tmp_path}")
    with pytest.raises(ConfigError, match=f"scheduler={name} cannot resume"):
        check_config(cfg, launcher_here=False, machine=False)


def test_one_scheduler_is_dense_ddp_the_baseline_of_every_speed_up():
    assert [name for name, spec in SCHEDULERS.items() if spec.baseline] == [baseline_spec().name]
    cfg = _compose(f"scheduler={baseline_spec().name}", "compressor=none")
    check_config(cfg, launcher_here=False, machine=False)


HEADLINES = [(name, line) for name, spec in SCHEDULERS.items() for line in spec.headline]


@pytest.mark.parametrize(("name", "headline"), HEADLINES, ids=lambda value: " ".join(value))
def test_each_headline_combination_is_a_row_of_gradsync_simulate(name, headline):
    spec = SCHEDULERS[name]
    compressor, *settings = headline
    assert compressor in group_options()["compressor"]
    assert tuple(settings) in spec.simulate_variants
    servers = f"trainer.servers={spec.capabilities.servers or 1}"
    cfg = _compose(f"scheduler={name}", f"compressor={compressor}", servers, *settings)
    check_config(cfg, launcher_here=False, machine=False)


PROFILE = ModelProfile(
    model="mlp",
    sizes=(2000, 50, 6000, 100, 1200, 10),
    forward=(1e-3,) * 6,
    backward=(2e-3,) * 6,
    update=1e-4,
    data=1e-4,
    batch_size=32,
    element_bytes=4,
)


def _dense_wire() -> Wire:
    return measure_wire(
        "none", NoneCompressor(), NoneFeedback(), torch.randn(sum(PROFILE.sizes)),
        [(size,) for size in PROFILE.sizes], workers=4,
    )  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_every_cost_model_prices_an_iteration(name):
    cfg = _compose(f"scheduler={name}")
    job = Job(PROFILE, Cluster(workers=4, bandwidth_bps=1e9), _dense_wire(), cfg.scheduler)
    seconds = predict(name, job).iteration
    assert math.isfinite(seconds)
    assert seconds >= sum(PROFILE.forward) + sum(PROFILE.backward)


def _numeric_literals(path: Path) -> list[float]:
    tree = ast.parse(path.read_text())
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float)
    ]


@pytest.mark.parametrize("value", DEFAULTS)
def test_each_scheduler_default_is_written_once(value):
    where = [
        str(path.relative_to(SOURCE))
        for path in sorted(SOURCE.rglob("*.py"))
        for literal in _numeric_literals(path)
        if type(literal) is type(value) and literal == value
    ]
    assert len(where) == 1, f"{value} is written in {where}"


@pytest.mark.parametrize("name", NAMES)
def test_the_processes_a_job_starts_follow_the_registry_also_read_back_from_yaml(name):
    """Servers are started for exactly the schedulers whose entry says so; a config Hydra saved
    unresolved (``.hydra/config.yaml``, read by ``gradsync report``) resolves the same."""
    cfg = _compose(f"scheduler={name}", "trainer.workers=3", "trainer.servers=2")
    servers = 2 if SCHEDULERS[name].capabilities.parameter_server else 0
    assert cfg.trainer.processes == 3 + servers
    plain = OmegaConf.create(OmegaConf.to_yaml(cfg))  # untyped, interpolations kept
    assert plain.trainer.processes == 3 + servers


@pytest.mark.parametrize("name", NAMES)
def test_the_engine_takes_its_steps_in_lockstep_exactly_when_its_entry_says_so(name):
    """The loop reads ``workers_in_lockstep`` from the engine (whether to reduce its metrics
    over workers); cost models read ``lockstep`` from the registry: they must agree."""
    from hydra.utils import get_class

    engine = get_class(SCHEDULERS[name].config._target_)
    assert engine.workers_in_lockstep == SCHEDULERS[name].capabilities.lockstep
