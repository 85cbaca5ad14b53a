"""Sphinx configuration of the documentation site (``make docs``: warnings are errors).

Pages are Markdown, read by MyST. ``reference/config.md`` is generated from the schemas
(``make reference``); the build fails while it is stale. ``benchmarks.md`` includes
BENCHMARKS.md as it is in the repository.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gradsync.jobs.reference import stale_reference

DOCS = Path(__file__).resolve().parent

project = "gradsync"
author = "the gradsync authors"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = "gradsync"
myst_heading_anchors = 4
"""Headings down to #### get anchors, so pages link to sections: ``page.md#a-heading``."""
myst_enable_extensions = ["deflist", "colon_fence"]
nitpicky = True


def check_reference(_: Any) -> None:
    """A stale reference is a warning, so the build (-W) fails naming what to run."""
    from sphinx.util import logging

    problem = stale_reference(DOCS)
    if problem is not None:
        logging.getLogger(__name__).warning(problem)


def setup(app: Any) -> None:
    app.connect("builder-inited", check_reference)
