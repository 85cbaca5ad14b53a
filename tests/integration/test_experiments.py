"""Every paper experiment recipe runs end to end (2 steps, tiny batches, generated data)."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_module

from gradsync.jobs.compose import CONFIG_MODULE
from gradsync.jobs.discovery import group_options
from tests.helpers.cli import run_cli, summary
from tests.helpers.datagen import generators

HEAVY = {  # ImageNet-variant models, about 10 s each: make test-full (every recipe composes in
    # tests/unit/test_configs.py, and the same code paths run here on the smaller recipes)
    "deftsched_vgg19_imagenet",
    "terngrad_alexnet_imagenet",
    "osp_resnet101_imagenet",
    "deftsched_resnet101_imagenet",
    # ResNet-18 on shaped links, about 17 s each; tests/unit/test_reproduce_recipes.py composes
    # every sweep of theirs, and the smaller omgs_*/deftsched_* recipes run the same schedulers.
    "repro_omgs",
    "repro_deftsched",
    "repro_omgs_gpu",
    "repro_deft_gpu",
}
EXPERIMENTS = [
    pytest.param(e, marks=pytest.mark.slow) if e in HEAVY else e
    for e in group_options()["experiment"]
    if e != "smoke"
]
DATA_FILES = generators()


def _choices(experiment: str) -> tuple[str, str]:
    """The recipe's dataset and device."""
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={experiment}"], return_hydra_config=True)
    device = cfg.trainer.device
    return str(cfg.hydra.runtime.choices.dataset), str(getattr(device, "value", device))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_runs_a_few_steps(experiment, gradsync_cmd, cli_env, tmp_path):
    dataset, device = _choices(experiment)
    data_overrides = DATA_FILES[dataset](tmp_path / "data") if dataset in DATA_FILES else []
    if dataset == "imagenet":  # above 64 px, so models keep their ImageNet variant, but cheaper
        data_overrides.append("dataset.image_size=96")
    if device == "cuda" and not torch.cuda.is_available():  # the rest of a GPU recipe, on CPU
        data_overrides.append("trainer.device=cpu")
    run_dir = tmp_path / "run"
    result = run_cli(
        gradsync_cmd,
        "run",
        f"experiment={experiment}",
        *data_overrides,
        "trainer.workers=2",
        "trainer.batch_size=4",
        "trainer.eval_batch_size=16",
        "trainer.max_steps=2",
        "trainer.checkpoint=false",
        f"hydra.run.dir={run_dir}",
        env=cli_env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    s = summary(run_dir)
    assert s["status"] == "completed"
    assert any(key.startswith("eval/") for key in s["final"])
