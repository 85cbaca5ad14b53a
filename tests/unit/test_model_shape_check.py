"""A model that cannot take its dataset's inputs is refused while composing, in one line, after
one try on the meta device (``gradsync/train/shape_check.py``); every bundled model takes the
inputs it is made for, and a job that was tried costs nothing the next time (capacity's cache
of model sizes). The refusals themselves are cases of ``test_bad_input.py``."""

from __future__ import annotations

import pytest
import torch

from gradsync.config.schema import TaskBound
from gradsync.jobs.compose import ConfigError, check_config, compose_all, compose_jobs
from gradsync.models.registry import MODELS
from gradsync.train import capacity
from gradsync.train.shape_check import input_problem

TINY = ["model=cnn", "dataset=synthetic", "dataset.image_shape=[3,1,1]"]

# Inputs every model of a task is made for: CIFAR's images, tokens. (ImageNet's, with the
# models made for them, are the recipes' that tests/unit/test_configs.py composes.)
INPUTS = {
    "classification": ["dataset=synthetic", "dataset.image_shape=[3,32,32]"],
    "language_model": ["dataset=synthetic", "dataset.kind=tokens", "dataset.seq_len=64"],
}


def _fresh_cache(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))


def test_every_bundled_model_takes_the_inputs_it_is_made_for():
    """No false refusal: every model option, tried on the meta device with the inputs its
    task's datasets give, composes (recommendation's datasets are sized by their files)."""
    assert all(issubclass(schema, TaskBound) for schema in MODELS.values())
    jobs = [
        [f"model={name}", *INPUTS[schema.TASK], "trainer.batch_size=2"]
        for name, schema in MODELS.items()
        if schema.TASK in INPUTS
    ]
    assert len(jobs) >= len(MODELS) - 1  # all but NCF
    for job, cfg in zip(jobs, compose_all(jobs), strict=True):
        try:
            check_config(cfg, launcher_here=False)
        except ConfigError as exc:
            pytest.fail(f"{' '.join(job)} was refused: {exc}")


def test_the_line_names_the_option_among_those_that_share_its_class():
    """resnet18, resnet50 and resnet101 are one class; their files set the depth."""
    with pytest.raises(ConfigError) as info:
        compose_jobs(
            ["model=resnet101", "dataset=synthetic", "dataset.image_shape=[3,1,1]",
             "trainer.batch_size=1"],
            multirun=False, launcher_here=False,
        )  # fmt: skip
    assert str(info.value).startswith(
        "model=resnet101 cannot take dataset=synthetic's inputs of shape [3, 1, 1] at "
        "trainer.batch_size=1: Expected more than 1 value per channel when training"
    )


def test_a_job_that_passed_is_sized_for_the_capacity_check_and_not_tried_again(
    monkeypatch, tmp_path
):
    _fresh_cache(monkeypatch, tmp_path)
    job = ["model=cnn", "dataset=synthetic", "dataset.image_shape=[3,8,8]"]
    (cfg,) = compose_jobs(job, multirun=False, launcher_here=False)
    assert capacity.sized_before(cfg)
    size = capacity.measure_model(cfg)
    assert size is not None

    def tried(cfg):
        raise AssertionError("a job sized before was tried again")

    monkeypatch.setattr(capacity, "measure_model", tried)
    compose_jobs(job, multirun=False, launcher_here=False)
    assert capacity.process_bytes(cfg) == capacity.PROCESS_BASE_BYTES + size.state_bytes()


def test_a_dataset_sized_only_by_its_files_is_remembered_as_such(monkeypatch, tmp_path):
    """A corpus's vocabulary is known once it is read: nothing to try, and the next job
    learns it from the cache, without importing torch for it."""
    _fresh_cache(monkeypatch, tmp_path)
    (cfg,) = compose_all([["model=lstm", "dataset=ptb"]])
    assert input_problem(cfg) is None
    assert capacity.sized_before(cfg) and capacity.model_size(cfg) is None


def _item(cfg):
    return torch.zeros(2, device="meta").sum().item()  # RuntimeError: "... meta tensors"


def _nonzero(cfg):
    return torch.zeros(2, device="meta").nonzero()  # NotImplementedError: no meta kernel


def _numpy(cfg):
    return torch.zeros(2, device="meta").numpy()  # TypeError: not about the inputs


@pytest.mark.parametrize(
    ("fails", "batch"), [(_item, 3), (_nonzero, 5), (_numpy, 7)], ids=["item", "nonzero", "numpy"]
)
def test_what_the_meta_device_cannot_tell_refuses_nothing(monkeypatch, tmp_path, fails, batch):
    """A model whose forward reads a value on the host, or runs an op without a meta kernel,
    is not at fault: the job composes, unsized (its worker runs it for real)."""
    _fresh_cache(monkeypatch, tmp_path)
    monkeypatch.setattr(capacity, "measure_model", fails)
    (cfg,) = compose_jobs(
        ["model=cnn", "dataset=synthetic", f"trainer.batch_size={batch}"],
        multirun=False, launcher_here=False,
    )  # fmt: skip
    assert not capacity.sized_before(cfg)


def test_printing_the_config_does_not_try_the_model():
    """``--cfg job`` only shows the job (and costs no torch import); running it refuses."""
    compose_jobs(TINY, multirun=False, launcher_here=False, machine=False)
    with pytest.raises(ConfigError, match=r"^model=cnn cannot take"):
        compose_jobs(TINY, multirun=False, launcher_here=False)
