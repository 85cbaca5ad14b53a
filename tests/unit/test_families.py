"""A worker reads its job's options back from the run's resolved YAML, where they have lost
their type: ``typed_options`` gives them their class again, with every value as composed."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from gradsync.families import option_classes, typed_options
from gradsync.jobs.compose import compose_jobs, resolved_yaml

CASES = [(g, name) for g in ("scheduler", "compressor") for name in option_classes()[g]]


@pytest.mark.parametrize(("group", "name"), CASES, ids=[f"{g}={n}" for g, n in CASES])
def test_options_read_back_from_yaml_are_typed_with_their_values(group: str, name: str) -> None:
    servers = "trainer.servers=1"
    (cfg,) = compose_jobs([f"{group}={name}", servers], multirun=False, launcher_here=False)
    composed = OmegaConf.to_object(cfg[group])
    read_back = typed_options(OmegaConf.create(resolved_yaml(cfg))[group], group)
    assert isinstance(composed, type(read_back))  # its own class, or one every sibling shares
    for spec in dataclasses.fields(read_back):
        assert getattr(read_back, spec.name) == getattr(composed, spec.name), spec.name
