"""What the import-linter contracts (``make lint``) cannot say: an import inside a function is
there only to keep start-up fast (it imports torch for a module the command line loads without
it), and says so; none is there to get round an import cycle, as none is left."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "gradsync").rglob("*.py"), *(ROOT / "runners").rglob("*.py")])
NAMED = "deferred for start-up"


def _deferred_imports(path: Path) -> list[tuple[int, str]]:
    """(line, import) of each import of gradsync inside a function, and whether a comment
    naming why (``NAMED``) opens the run of imports it belongs to."""
    lines = path.read_text(encoding="utf-8").split("\n")
    found = []
    for function in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gradsync"):
                above = node.lineno - 2
                while above >= 0 and lines[above].strip().startswith(("from ", "import ", ")")):
                    above -= 1
                while above >= 0 and not lines[above].strip():  # a blank line in the run
                    above -= 1
                    while above >= 0 and lines[above].strip().startswith(("from ", "import ")):
                        above -= 1
                comment = []
                while above >= 0 and lines[above].strip().startswith("#"):
                    comment.insert(0, lines[above].strip().lstrip("#").strip().lower())
                    above -= 1
                if NAMED not in " ".join(comment):
                    found.append((node.lineno, ast.unparse(node)))
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_an_import_inside_a_function_says_it_is_deferred_for_start_up(path: Path) -> None:
    unnamed = _deferred_imports(path)
    assert not unnamed, (
        f"{path.relative_to(ROOT)}: imports inside functions with no '# {NAMED.capitalize()}: "
        f"...' comment above them: {unnamed}; import at the top of the module unless it is"
    )


HOOKS = "gradsync/schedulers/engine/hooks.py"
"""The one module that registers hooks on a model (``hook_model``)."""
MODEL_HOOKS = {
    "register_hook",
    "register_post_accumulate_grad_hook",
    "register_forward_pre_hook",
    "register_forward_hook",
    "register_full_backward_pre_hook",
    "register_full_backward_hook",
}


def test_hooks_go_onto_the_model_in_one_place() -> None:
    registering = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in SOURCES
        if path.relative_to(ROOT).as_posix() != HOOKS
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr in MODEL_HOOKS
    ]
    assert registering == [], f"hooks registered outside {HOOKS} (use hook_model): {registering}"
