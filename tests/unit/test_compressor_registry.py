"""The compressor registry is the one list of compressors: what Hydra offers, what the
all-reducing schedulers say they take, and what each option's class declares of its payloads,
which must be what the built compressor does."""

from __future__ import annotations

import re

import pytest
from omegaconf import OmegaConf

from gradsync.compressors.choices import EXCHANGES
from gradsync.compressors.options.base import CompressorConfig
from gradsync.compressors.registry import COMPRESSORS, allreducible_choices
from gradsync.config.instantiate import build
from gradsync.jobs.compose import compose_jobs
from gradsync.jobs.discovery import group_options


def _settings() -> list[list[str]]:
    """Every compressor, and each exchange of those that have one."""
    cases = []
    for name, options in COMPRESSORS.items():
        if "exchange" in options.__dataclass_fields__:
            cases += [[f"compressor={name}", f"compressor.exchange={e}"] for e in EXCHANGES]
        else:
            cases.append([f"compressor={name}"])
    return cases


def test_hydra_offers_exactly_the_registered_compressors() -> None:
    assert group_options()["compressor"] == sorted(COMPRESSORS)


@pytest.mark.parametrize("overrides", _settings(), ids=" ".join)
def test_the_options_say_whether_the_built_compressor_s_payloads_add_up(
    overrides: list[str],
) -> None:
    (cfg,) = compose_jobs(overrides, multirun=False, launcher_here=False)
    options = OmegaConf.to_object(cfg.compressor)
    assert isinstance(options, CompressorConfig)
    compressor = build(cfg.compressor, path="compressor")
    assert options.adds_up() == compressor.allreducible


def test_an_all_reducing_scheduler_offers_every_compressor_that_adds_up() -> None:
    offered = set(re.findall(r"[a-z0-9]+", allreducible_choices()))
    for name, options in COMPRESSORS.items():
        named = name in offered
        assert named == (options.payloads_add_up or bool(options.add_up_with)), name
