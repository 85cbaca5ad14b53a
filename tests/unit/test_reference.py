"""The configuration reference and ``gradsync run GROUP=OPTION --help`` read every meaning from
the schemas' field docstrings and the options' YAML comments: nothing may go undocumented."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from gradsync.cli.run_args import parse_run_args, run_help
from gradsync.compressors.options.sparsifiers import DGCConfig, TopKConfig
from gradsync.jobs.compose import ConfigError
from gradsync.jobs.reference import (
    METHODS_INDEX,
    TAKES_BEGIN,
    KeyDoc,
    OptionDoc,
    all_option_docs,
    field_docs,
    first_sentence,
    markdown_text,
    method_pages,
    option_doc,
    reference_markdown,
    undocumented,
    with_takes_table,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def docs() -> dict[str, list[OptionDoc]]:
    return all_option_docs()


def test_every_group_option_and_key_has_a_meaning(docs: dict[str, list[OptionDoc]]) -> None:
    assert undocumented(docs) == [], "write a docstring under each of these fields / options"


def test_a_field_without_a_docstring_is_reported() -> None:
    @dataclass
    class Half:
        said: int = 1
        """Documented."""
        unsaid: int = 2

    assert field_docs(Half) == {"said": "Documented."}
    meanings = field_docs(Half)
    keys = tuple(
        KeyDoc(f"x.{name}", "int", "1", meanings.get(name, "")) for name in ("said", "unsaid")
    )
    docs = {"model": [OptionDoc("model", "half", "A model.", keys)], "nogroup": []}
    assert undocumented(docs) == ["x.unsaid (model=half)", "group nogroup"]


def test_the_committed_reference_is_the_schemas(docs: dict[str, list[OptionDoc]]) -> None:
    """docs/reference/config.md is committed, to read without building the site; it must say
    what the schemas say (make reference rewrites it)."""
    committed = (DOCS / "reference" / "config.md").read_text(encoding="utf-8")
    assert committed == reference_markdown(docs, method_pages(DOCS)), "run make reference"


def test_the_methods_index_says_what_each_scheduler_takes_as_the_checks_decide() -> None:
    """Its table is written from the registries by the checks themselves (make reference)."""
    committed = (DOCS / METHODS_INDEX).read_text(encoding="utf-8")
    assert TAKES_BEGIN in committed
    assert with_takes_table(committed) == committed, "run make reference"
    refused = with_takes_table(committed).split("| `osp` |")[1].split("\n")[0]
    assert refused.startswith(" `none` | ")  # osp takes only dense gradients


@pytest.mark.parametrize(
    ("group", "option"),
    [("runner", "slurm"), ("logger", "wandb"), ("model", "resnet50"), ("scheduler", "osp")],
)
def test_options_composed_together_read_as_each_alone(
    docs: dict[str, list[OptionDoc]], group: str, option: str
) -> None:
    """The reference composes the i-th option of every group at once; an option that set
    another group's keys (a _global_ package) would show here."""
    together = next(doc for doc in docs[group] if doc.option == option)
    assert together == option_doc(group, option)


def test_markdown_shows_meanings_literally() -> None:
    assert markdown_text("ROOT/<class>/* and a*b*c, `x|<y>`") == (
        "ROOT/\\<class\\>/\\* and a\\*b\\*c, `x\\|<y>`"
    )


def test_a_subclass_docstring_overrides_its_base() -> None:
    assert field_docs(DGCConfig)["density"] == "DGC's 99.9% sparsity."
    assert field_docs(TopKConfig)["density"].startswith("Fraction of the elements")


def test_defaults_are_the_composed_options_values(docs: dict[str, list[OptionDoc]]) -> None:
    """The YAML file of an option may change its schema's default: the reference shows what a
    run gets."""
    depth = {
        option.option: {key.key: key.default for key in option.keys}["model.depth"]
        for option in docs["model"]
        if option.option in ("resnet18", "resnet50")
    }
    assert depth == {"resnet18": "18", "resnet50": "50"}
    dgc = {
        key.key: key.default
        for key in next(o for o in docs["compressor"] if o.option == "dgc").keys
    }
    assert dgc["compressor.exchange"] == "allgather" and dgc["compressor.warmup_epochs"] == "4"


def test_the_reference_has_every_option_and_key(docs: dict[str, list[OptionDoc]]) -> None:
    page = reference_markdown(docs, {"compressor=topk": "../methods/compressors/topk.md"})
    for group, options in docs.items():
        assert f"\n## {group}\n" in page
        for option in options:
            assert f"\n### {group}={option.option}\n" in page
            for key in option.keys:
                assert f"| `{key.key}` |" in page
    assert "See [topk](../methods/compressors/topk.md)." in page


def test_first_sentence_keeps_abbreviations() -> None:
    assert first_sentence("Nodes (``--exclude``, e.g. ``n1``). More.") == (
        "Nodes (``--exclude``, e.g. ``n1``)."
    )


def test_run_help_lists_the_chosen_options_keys_with_their_meaning() -> None:
    text = run_help(["compressor=topk", "trainer.workers=4"])
    assert "compressor=topk: Top-k" in text
    assert "compressor.density=0.01\n      Fraction of the elements each worker selects" in text
    assert "trainer.workers=" not in text  # only the chosen option's keys
    plain = run_help([])
    assert "trainer.workers=2\n      Worker processes" in plain


def test_run_help_refuses_an_unknown_option_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="unknown compressor 'topkk'; valid options: bf16"):
        parse_run_args(["compressor=topkk", "--help"])
    assert parse_run_args(["scheduler=deft", "--help"]) is None
    out = capsys.readouterr().out
    assert "scheduler=deft: " in out and "\n  scheduler.epsilon=0.01\n      How far" in out


def test_a_recipe_lists_what_it_sets(docs: dict[str, list[OptionDoc]]) -> None:
    smoke = next(doc for doc in docs["experiment"] if doc.option == "smoke")
    assert smoke.settings == (
        "model=mlp",
        "trainer.workers=2",
        "trainer.max_steps=20",
        "trainer.checkpoint=false",
    )
    assert "  sets: model=mlp trainer.workers=2" in run_help(["experiment=smoke"])
