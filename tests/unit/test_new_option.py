"""A new compressor and a new scheduler, each with one option, are their own module, one
registry line and their docs page; nothing else is edited. Each is written here as a user would
write it (a package beside the family's others), registered with one line, and then
``--help``, the configuration reference, the compatibility checks and the contract checks take
it up."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from hydra.core.config_store import ConfigStore

import gradsync.compressors
import gradsync.schedulers
from gradsync.cli.groups import groups_text
from gradsync.compressors.registry import COMPRESSORS, allreducible_choices
from gradsync.jobs import discovery
from gradsync.jobs.compose import ConfigError, compose_jobs
from gradsync.jobs.reference import (
    all_option_docs,
    method_pages,
    option_doc,
    reference_markdown,
    undocumented,
)
from gradsync.schedulers.registry import SCHEDULERS, Capabilities, SchedulerSpec

COMPRESSOR = {
    "compressors/firstk/__init__.py": '''
        """The options of compressor=firstk (torch-free)."""

        from dataclasses import dataclass
        from typing import ClassVar

        from gradsync.compressors.options.base import SparsifierConfig
        from gradsync.config.checks import option


        @dataclass
        class FirstKConfig(SparsifierConfig):
            """First-k: k = density * n elements from ``offset`` on, the same on every worker,
            all-reduced."""

            _target_: str = "gradsync.compressors.firstk.compressor.FirstKCompressor"
            payloads_add_up: ClassVar[bool] = True
            offset: int = option(0, at_least=0)
            """Where each group's run of selected elements starts."""
    ''',
    "compressors/firstk/compressor.py": """
        import torch
        from torch import Tensor

        from gradsync.compressors.sparse import AgreedIndexCompressor

        from gradsync.compressors.firstk import FirstKConfig


        class FirstKCompressor(AgreedIndexCompressor):
            def __init__(self, *, density: float, offset: int = FirstKConfig.offset, **warmup):
                super().__init__(density=density, **warmup)
                self.offset = offset

            def agree(self, flat: Tensor, *, name: str, step: int, sizes: list, k: int) -> Tensor:
                start = min(self.offset, flat.numel() - k)
                return torch.arange(start, start + k, device=flat.device)
    """,
}
SCHEDULER = {
    "schedulers/everyn/__init__.py": '''
        """The options of scheduler=everyn (torch-free)."""

        from dataclasses import dataclass

        from gradsync.config.checks import option
        from gradsync.schedulers.options import SchedulerOptions


        @dataclass
        class EveryNConfig(SchedulerOptions):
            _target_: str = "gradsync.schedulers.everyn.sync.EveryNSync"
            tensors: int = option(4, at_least=1)
            """Tensors per group, counted from the output layer."""
    ''',
    "schedulers/everyn/sync.py": """
        from gradsync.schedulers.pipelined.pipelined import PipelinedSync

        from gradsync.schedulers.everyn import EveryNConfig


        def every(tensors, count):
            full, rest = divmod(count, tensors)
            return (tensors,) * full + ((rest,) if rest else ())


        class EveryNTensors:
            profile_steps = 0

            def __init__(self, tensors):
                self.tensors = tensors

            def plan(self, job):
                return every(self.tensors, len(job.sizes)), {}


        class EveryNSync(PipelinedSync):
            def __init__(self, *, tensors=EveryNConfig.tensors, **parts):
                super().__init__(planner=EveryNTensors(tensors), **parts)
    """,
    "schedulers/everyn/cost.py": """
        from gradsync.projection.predict import merged_timeline

        from gradsync.schedulers.everyn.sync import every


        def iteration(job):
            tensors = int(job.scheduler.tensors)
            return merged_timeline(lambda layers, cost: every(tensors, len(layers.sizes)))(job)
    """,
}
PAGES = {
    "methods/compressors/firstk.md": "# firstk\n\n## How it works\n\n## Options\n",
    "methods/schedulers/everyn.md": "# everyn\n\n## How it works\n\n## Options\n",
}


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")


@pytest.fixture
def new_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Both methods written as packages of their families, each registered with its one line;
    the documentation folder, with their pages, is returned."""
    _write(tmp_path / "code", {**COMPRESSOR, **SCHEDULER})
    _write(tmp_path / "docs", PAGES)
    # The folders stand for gradsync/compressors/ and gradsync/schedulers/ of a checkout.
    for package in (gradsync.compressors, gradsync.schedulers):
        folder = tmp_path / "code" / package.__name__.rsplit(".", 1)[-1]
        monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
    from gradsync.compressors.firstk import FirstKConfig  # importable only now
    from gradsync.schedulers.everyn import EveryNConfig

    # The one registry line of each:
    monkeypatch.setitem(COMPRESSORS, "firstk", FirstKConfig)
    monkeypatch.setitem(
        SCHEDULERS,
        "everyn",
        SchedulerSpec(
            name="everyn",
            summary="groups of `tensors` tensors, all-reduced as soon as backward fills them",
            config=EveryNConfig,
            capabilities=Capabilities(allreduces=True, overlaps_backward=True),
            cost_model="gradsync.schedulers.everyn.cost:iteration",
        ),
    )
    discovery._listed.cache_clear()
    yield tmp_path / "docs"
    discovery._listed.cache_clear()
    store = ConfigStore.instance().repo
    store["compressor"].pop("firstk.yaml", None)
    store["scheduler"].pop("everyn.yaml", None)
    new = ("gradsync.compressors.firstk", "gradsync.schedulers.everyn")
    for module in [m for m in sys.modules if m.startswith(new)]:
        del sys.modules[module]


def test_help_lists_them_with_their_options(new_options: Path) -> None:
    listed = groups_text()
    assert "firstk" in listed and "everyn" in listed
    compressor = option_doc("compressor", "firstk")
    assert compressor.summary.startswith("First-k: k = density * n elements from `offset` on")
    assert [k.key for k in compressor.keys if k.key == "compressor.offset"] == ["compressor.offset"]
    scheduler = option_doc("scheduler", "everyn")
    assert scheduler.summary.startswith("groups of `tensors` tensors")
    assert {k.key: k.default for k in scheduler.keys}["scheduler.tensors"] == "4"


def test_the_reference_documents_them_and_links_their_pages(new_options: Path) -> None:
    docs = all_option_docs()
    assert undocumented(docs) == []
    page = reference_markdown(docs, method_pages(new_options))
    assert "### compressor=firstk" in page and "### scheduler=everyn" in page
    assert "(../methods/compressors/firstk.md)" in page
    assert "(../methods/schedulers/everyn.md)" in page
    assert "`compressor.offset`" in page and "`scheduler.tensors`" in page


def test_the_compatibility_checks_take_their_declarations(new_options: Path) -> None:
    assert "firstk" in allreducible_choices()  # what an all-reducing scheduler offers
    compose_jobs(["compressor=firstk", "scheduler=wfbp"], multirun=False, launcher_here=False)
    with pytest.raises(ConfigError, match="scheduler=everyn all-reduces, but compressor=terngrad"):
        compose_jobs(["scheduler=everyn", "compressor=terngrad"], multirun=False)
    with pytest.raises(ConfigError, match=r"compressor\.offset must be >= 0, got -1"):
        compose_jobs(["compressor=firstk", "compressor.offset=-1"], multirun=False)
    with pytest.raises(ConfigError, match=r"scheduler\.tensors must be >= 1, got 0"):
        compose_jobs(["scheduler=everyn", "scheduler.tensors=0"], multirun=False)


def test_the_contract_checks_run_them(new_options: Path, tmp_path: Path) -> None:
    from tests.unit import test_compressor_registry, test_configs, test_defaults_once, test_registry

    assert discovery.group_options()["compressor"] == sorted(COMPRESSORS)
    assert discovery.group_options()["scheduler"] == sorted(SCHEDULERS)
    for group, name in (("compressor", "firstk"), ("scheduler", "everyn")):
        test_configs.test_every_method_runs_with_the_defaults_of_everything_else(group, name)
        cls = COMPRESSORS[name] if group == "compressor" else SCHEDULERS[name].config
        test_defaults_once.test_the_constructor_takes_its_defaults_from_the_options(
            group, name, cls
        )
        test_configs.test_option_composes_and_builds(group, name, tmp_path)
    test_compressor_registry.test_the_options_say_whether_the_built_compressor_s_payloads_add_up(
        ["compressor=firstk"]
    )
    test_registry.test_each_option_composes_to_its_typed_options("everyn")
    test_registry.test_schedulers_that_sum_payloads_refuse_payloads_that_do_not_add_up("everyn")
    test_registry.test_every_cost_model_prices_an_iteration("everyn")
