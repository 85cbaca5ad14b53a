"""Sphinx configuration of the documentation site (``make docs``: warnings are errors).

Pages are Markdown, read by MyST. Two pages are generated at every build, never committed, so
they cannot drift from their sources: ``reference/config.md`` from the schemas
(``gradsync.config.reference``) and ``benchmarks.md`` includes BENCHMARKS.md as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gradsync.config.reference import all_option_docs, reference_markdown

DOCS = Path(__file__).resolve().parent
METHOD_GROUPS = ("compressor", "scheduler")

project = "gradsync"
author = "the gradsync authors"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = "gradsync"
myst_heading_anchors = 4
"""Headings down to ####get anchors, so pages link to sections: ``page.md#a-heading``."""
myst_enable_extensions = ["deflist", "colon_fence"]
nitpicky = True


def method_pages() -> dict[str, str]:
    """``group=option`` to its methods page, relative to ``reference/``."""
    return {
        f"{group}={page.stem}": f"../methods/{group}s/{page.name}"
        for group in METHOD_GROUPS
        for page in sorted((DOCS / "methods" / f"{group}s").glob("*.md"))
        if page.stem != "index"
    }


def write_reference(_: Any) -> None:
    page = DOCS / "reference" / "config.md"
    text = reference_markdown(all_option_docs(), method_pages())
    # Rewritten only when it changes, so an incremental build does not re-read it.
    if not page.exists() or page.read_text(encoding="utf-8") != text:
        page.write_text(text, encoding="utf-8")


def setup(app: Any) -> None:
    app.connect("builder-inited", write_reference)
