"""Every option of every config group composes and builds (auto-discovered: a new option file
is tested without editing this file; a new group must get a contract check below)."""

from __future__ import annotations

import time

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import DictConfig

from gradsync.config.compose import CONFIG_MODULE, check_config
from gradsync.config.discovery import group_options
from gradsync.config.instantiate import build
from gradsync.data.spec import DataSpec
from gradsync.types import Compressor, ErrorFeedback

OPTIONS = [(g, o) for g, opts in group_options().items() for o in opts]
SPEC = DataSpec(task="classification", num_classes=10, input_shape=(1, 8, 8))


def _model(cfg: DictConfig) -> None:
    model = build(cfg.model, path="model")(spec=SPEC)
    assert model(torch.zeros(2, *SPEC.input_shape)).shape == (2, SPEC.num_classes)


def _dataset(cfg: DictConfig) -> None:
    splits = build(cfg.dataset, path="dataset").load()
    x, y = splits.train[0]
    assert tuple(x.shape) == splits.spec.input_shape
    assert 0 <= int(y) < splits.spec.num_classes
    assert len(splits.train) > 0 and len(splits.test) > 0


def _compressor(cfg: DictConfig) -> None:
    compressor = build(cfg.compressor, path="compressor")
    assert isinstance(compressor, Compressor)
    grad = torch.randn(1000)
    payload, ctx = compressor.compress(grad, name="t", step=0)
    out = compressor.decompress(payload, ctx)
    assert out.shape == grad.shape and out.dtype == grad.dtype
    if compressor.lossless:
        assert torch.equal(out, grad)


def _feedback(cfg: DictConfig) -> None:
    assert isinstance(build(cfg.feedback, path="feedback"), ErrorFeedback)


def _scheduler(cfg: DictConfig) -> None:
    factory = build(cfg.scheduler, path="scheduler")
    assert callable(factory)


def _runner(cfg: DictConfig) -> None:
    assert hasattr(build(cfg.runner, path="runner"), "run")


def _composes(cfg: DictConfig) -> None:
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
def test_option_composes_and_builds(group, option):
    assert group in CHECKS, f"config group '{group}' has no contract check in this test"
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose("train", overrides=[f"{group}={option}"])
    check_config(cfg)
    CHECKS[group](cfg)


def test_default_scheduler_builds_with_runtime_objects():
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose("train")
    factory = build(cfg.scheduler, path="scheduler")
    sync = factory(
        compressor=build(cfg.compressor, path="compressor"),
        feedback=build(cfg.feedback, path="feedback"),
        collective=object(),
        clock=time.perf_counter,
    )
    assert hasattr(sync, "step") and hasattr(sync, "attach")


def test_instantiate_rejects_targets_outside_the_allow_list():
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose("train", overrides=["compressor._target_=os.system"])
    with pytest.raises(ValueError, match="not allowed"):
        build(cfg.compressor, path="compressor")
