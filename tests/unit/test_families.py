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


EVERY_CLASS = sorted(
    {cls for options in option_classes().values() for cls in options.values()},
    key=lambda cls: cls.__name__,
)


@pytest.mark.parametrize("cls", EVERY_CLASS, ids=lambda cls: cls.__name__)
def test_an_option_a_class_declares_again_keeps_its_check(cls: type) -> None:
    """A subclass that gives a field a default of its own still checks it (as its base does,
    or narrower: DeFT takes fewer staleness corrections)."""
    for spec in dataclasses.fields(cls):
        for base in cls.__mro__[1:]:
            inherited = getattr(base, "__dataclass_fields__", {}).get(spec.name)
            if inherited is not None and "check" in inherited.metadata:
                assert "check" in spec.metadata, (
                    f"{cls.__name__}.{spec.name} drops the check {base.__name__} declares"
                )
