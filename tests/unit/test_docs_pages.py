"""Every option a user can choose has a page of the documentation that explains it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from gradsync.jobs.discovery import group_options

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
METHOD_PAGES = {"compressor": "methods/compressors", "scheduler": "methods/schedulers"}
"""Groups whose options each have a page of their own: ``DIR/<option>.md``."""
MENTIONED_IN = {
    "feedback": ("methods/feedback.md", "", "feedback={}"),
    "runner": ("guide/*.md", "", "runner={}"),
    "model": ("guide/jobs.md", "## Models and datasets", "`{}`"),
    "dataset": ("guide/jobs.md", "## Models and datasets", "`{}`"),
}
"""Groups whose options are each explained in pages (a glob), from a section on (its heading;
"": the whole page), as a text the option fills in (a ``group=option``, a table row)."""


@pytest.fixture(scope="module")
def options() -> dict[str, list[str]]:
    return group_options()


@pytest.mark.parametrize("group", sorted(METHOD_PAGES))
def test_each_method_option_has_its_page(group: str, options: dict[str, list[str]]) -> None:
    folder = DOCS / METHOD_PAGES[group]
    pages = {page.stem for page in folder.glob("*.md")} - {"index"}
    assert pages == set(options[group]), "one page per option, named after it"
    for option in options[group]:
        text = (folder / f"{option}.md").read_text(encoding="utf-8")
        for section in ("## How it works", "## Options"):
            assert section in text, f"{folder.name}/{option}.md has no '{section}'"


@pytest.mark.parametrize("group", sorted(MENTIONED_IN))
def test_each_option_is_explained_in_its_pages(group: str, options: dict[str, list[str]]) -> None:
    pages, section, form = MENTIONED_IN[group]
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.glob(pages)))
    assert section in text, f"{pages} has no section {section!r}"
    explained = text[text.index(section) :]
    missing = [o for o in options[group] if form.format(o) not in explained]
    assert missing == [], f"{pages} explains no {', '.join(missing)}"


def test_no_reference_to_documents_outside_the_repository() -> None:
    """Comments and pages point into docs/, never to notes a reader does not have."""
    word = "SPE" + "CS"  # spelled apart, so this file does not match itself
    tracked = subprocess.run(
        ["git", "grep", "-l", "-w", word], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert tracked.stdout.split() == []


def test_the_readme_is_one_page() -> None:
    """What gradsync is, the quick start, everyday commands, a map and how to cite: the rest
    lives in docs/."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200


def _documented_defaults() -> list[tuple[str, str, str, str]]:
    """``(page, key, default, row)`` of every row of a ``| key | default | ...`` table in the
    hand-written pages."""
    rows = []
    for page in sorted(DOCS.rglob("*.md")):
        if page.relative_to(DOCS) == Path("reference/config.md"):
            continue
        header = False
        for line in page.read_text(encoding="utf-8").splitlines():
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not line.startswith("|"):
                header = False
            elif cells[:2] == ["key", "default"]:
                header = True
            elif header and not set(cells[0]) <= set("-: "):
                # A row may list several keys and their defaults: `a`, `b` | 1, 2.
                keys, defaults = ([v.strip().strip("`") for v in c.split(",")] for c in cells[:2])
                if len(defaults) != len(keys):
                    defaults = [cells[1].strip("`")] * len(keys)
                for key, default in zip(keys, defaults, strict=True):
                    rows.append((str(page.relative_to(DOCS)), key, default, line))
    return rows


def _same_value(documented: str, actual: str) -> bool:
    try:
        return float(documented) == float(actual)
    except ValueError:
        return documented.lower() == actual.lower()


def test_documented_keys_and_defaults_are_the_schemas() -> None:
    """A hand-written table of keys (a methods page's options, the guide's trainer keys) names
    keys that exist, with the defaults a run gets: on a methods page, its own option's."""
    from gradsync.jobs.reference import all_option_docs

    docs = all_option_docs()
    rows = _documented_defaults()
    assert len(rows) > 50, "the pages' key tables were not found"
    wrong = []
    for page, key, default, row in rows:
        group = key.split(".")[0]
        own = Path(page).stem if page.startswith(f"methods/{group}s/") else None
        found = [
            doc.default
            for option in docs.get(group, [])
            if own in (None, option.option)
            for doc in option.keys
            if doc.key == key and not doc.derived
        ]
        derived = any(
            doc.derived for option in docs.get(group, []) for doc in option.keys if doc.key == key
        )
        if not derived and not any(_same_value(default, actual) for actual in found):
            wrong.append(f"{page}: {row} (schemas: {sorted(set(found)) or 'no such key'})")
    assert wrong == [], "\n".join(wrong)


def test_the_readmes_links_lead_to_files() -> None:
    """README.md is read on its own (the site's build checks only docs/): its links must not
    break when a page moves."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets, "the README links into docs/"
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert missing == []


@pytest.mark.parametrize("group", sorted(METHOD_PAGES))
def test_the_methods_index_tables_every_option_once(
    group: str, options: dict[str, list[str]]
) -> None:
    """The index's table of a group (``## Compressors``, ``## Schedulers``) has a row linking
    each option's page, and no row for an option that is gone."""
    text = (DOCS / "methods" / "index.md").read_text(encoding="utf-8")
    section = text[text.index(f"## {group.capitalize()}s\n") :]
    table = section[: section.index("\n\n", section.index("|"))]
    folder = METHOD_PAGES[group].split("/")[-1]
    linked = re.findall(rf"\[(\w+)\]\({folder}/(\w+)\.md\)", table)
    assert all(name == page for name, page in linked)
    assert sorted(name for name, _ in linked) == sorted(options[group])
