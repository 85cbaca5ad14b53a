"""Every option of every config group composes and builds (auto-discovered: a new option file
is tested without editing this file; a new group must get a contract check below)."""

from __future__ import annotations

import time

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import DictConfig, OmegaConf

from gradsync.compressors.none import NoneCompressor
from gradsync.compressors.randomk import RandomKCompressor
from gradsync.config.instantiate import build
from gradsync.config.schema import TrainConfig
from gradsync.data.spec import DataSpec
from gradsync.jobs.compose import CONFIG_MODULE, check_config, compose_jobs
from gradsync.jobs.discovery import group_options
from gradsync.train.build import build_optimizer
from gradsync.types import Compressor, ErrorFeedback, GroupInfo
from tests.helpers.datagen import generators

OPTIONS = [(g, o) for g, opts in group_options().items() for o in opts]
DATA_FILES = generators()

# A small input of each task's shape, and the output shape the model must produce for it.
TASK_PROBES = {
    "classification": (
        DataSpec(task="classification", num_classes=10, input_shape=(3, 32, 32)),
        lambda: (torch.randn(2, 3, 32, 32),),
        (2, 10),
    ),
    "language_model": (
        DataSpec(task="language_model", vocab_size=50),
        lambda: (torch.randint(0, 50, (2, 7)),),
        (2, 7, 50),
    ),
    "recommendation": (
        DataSpec(task="recommendation", num_users=20, num_items=30),
        lambda: (torch.randint(0, 20, (4,)), torch.randint(0, 30, (4,))),
        (4,),
    ),
}


TASK_MODELS = {"classification": "mlp", "language_model": "lstm", "recommendation": "ncf"}


def _model(cfg: DictConfig, typed: TrainConfig) -> None:
    spec, make_inputs, shape = TASK_PROBES[typed.model.task_kind()]
    model = build(cfg.model, path="model")(spec=spec)
    out = model(*make_inputs())
    assert out.shape == shape
    out.float().sum().backward()
    assert any(p.grad is not None for p in model.parameters())


def _dataset(cfg: DictConfig, typed: TrainConfig) -> None:
    splits = build(cfg.dataset, path="dataset").load()
    assert splits.spec.task == typed.dataset.task_kind()
    assert len(splits.train) > 0 and len(splits.test) > 0
    assert isinstance(splits.train[0], tuple) and isinstance(splits.test[0], tuple)


def _compressor(cfg: DictConfig, typed: TrainConfig) -> None:
    compressor = build(cfg.compressor, path="compressor")
    assert isinstance(compressor, Compressor)
    grad = torch.randn(1000)
    payload, ctx = compressor.compress(grad, group=GroupInfo("t", 0))
    out = compressor.decompress(payload, ctx)
    assert out.shape == grad.shape and out.dtype == grad.dtype
    if compressor.lossless:
        assert torch.equal(out, grad)


def _feedback(cfg: DictConfig, typed: TrainConfig) -> None:
    # A feedback option is a policy: built with the run's compressor, it gives the memory.
    for compressor in (NoneCompressor(), RandomKCompressor(density=0.1)):
        assert isinstance(
            build(cfg.feedback, path="feedback", compressor=compressor), ErrorFeedback
        )


def _scheduler(cfg: DictConfig, typed: TrainConfig) -> None:
    factory = build(cfg.scheduler, path="scheduler")
    assert callable(factory)


def _runner(cfg: DictConfig, typed: TrainConfig) -> None:
    assert hasattr(build(cfg.runner, path="runner"), "run")


def _composes(cfg: DictConfig, typed: TrainConfig) -> None:
    assert cfg.trainer.workers >= 1


CHECKS = {
    "model": _model,
    "dataset": _dataset,
    "compressor": _compressor,
    "feedback": _feedback,
    "scheduler": _scheduler,
    "runner": _runner,
    "trainer": _composes,
    "logger": _composes,
    "experiment": _composes,
}


WITH_THE_OTHERS_DEFAULTS = [(g, o) for g in ("compressor", "scheduler") for o in group_options()[g]]


@pytest.mark.parametrize(
    ("group", "option"),
    WITH_THE_OTHERS_DEFAULTS,
    ids=[f"{g}={o}" for g, o in WITH_THE_OTHERS_DEFAULTS],
)
def test_every_method_runs_with_the_defaults_of_everything_else(group, option):
    """A new user types ``gradsync run compressor=dgc`` and nothing else: every compressor and
    every scheduler is a job as it stands (an option that implies another setting derives it,
    as DGC takes trainer.momentum as its own). ``tests/integration/test_cli_run.py`` trains
    each such job (slow)."""
    compose_jobs([f"{group}={option}"], multirun=False)


def test_dgc_takes_the_jobs_momentum_and_the_optimizer_steps_without():
    (cfg,) = compose_jobs(["compressor=dgc"], multirun=False, launcher_here=False)
    assert cfg.compressor.momentum == cfg.trainer.momentum == 0.9
    optimizer = build_optimizer(cfg, torch.nn.Linear(2, 1))
    assert optimizer.param_groups[0]["momentum"] == 0
    (plain,) = compose_jobs(["compressor=topk"], multirun=False, launcher_here=False)
    assert build_optimizer(plain, torch.nn.Linear(2, 1)).param_groups[0]["momentum"] == 0.9


def test_every_group_is_discovered():
    groups = {g for g, _ in OPTIONS}
    assert {
        "model",
        "dataset",
        "compressor",
        "feedback",
        "scheduler",
        "trainer",
        "runner",
        "logger",
    } <= groups


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_option_composes_and_builds(group, option, tmp_path):
    assert group in CHECKS, f"config group '{group}' has no contract check in this test"
    overrides = [f"{group}={option}"]
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        choices = compose("train", overrides=overrides, return_hydra_config=True).hydra.runtime
        dataset = str(choices.choices.dataset)
        if group in ("dataset", "experiment") and dataset in DATA_FILES:
            overrides += DATA_FILES[dataset](tmp_path)
        cfg = compose("train", overrides=overrides)
        if group == "dataset":  # pair it with a model of its task, as a user would
            task = OmegaConf.to_object(cfg.dataset).task_kind()
            cfg = compose("train", overrides=[*overrides, f"model={TASK_MODELS[task]}"])
    if group != "model":  # a model is checked on its own task's shapes, whatever the dataset
        # Whether this machine could launch it (root, sbatch, torchrun) is not the option's.
        check_config(cfg, launcher_here=False)
    CHECKS[group](cfg, OmegaConf.to_object(cfg))


def test_default_scheduler_builds_with_runtime_objects():
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose("train")
    factory = build(cfg.scheduler, path="scheduler")
    compressor = build(cfg.compressor, path="compressor")
    sync = factory(
        compressor=compressor,
        feedback=build(cfg.feedback, path="feedback", compressor=compressor),
        collective=object(),
        clock=time.perf_counter,
    )
    assert hasattr(sync, "step") and hasattr(sync, "attach")


def test_instantiate_rejects_targets_outside_the_allow_list():
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose("train", overrides=["compressor._target_=os.system"])
    with pytest.raises(ValueError, match="not allowed"):
        build(cfg.compressor, path="compressor")
