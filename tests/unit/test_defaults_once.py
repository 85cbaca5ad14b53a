"""Every option's default is written once, in its options class: the YAML file that selects an
option does not restate it, and the constructor the option builds takes it from there (or has
none) instead of writing the value again."""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import inspect
import textwrap
import typing

import pytest
from omegaconf import OmegaConf

from gradsync.config.files import ROOT_CONFIG_FILE
from gradsync.families import option_classes

CONF = ROOT_CONFIG_FILE.parent


def _every_option() -> list[tuple[str, str, type]]:
    return [
        (group, name, cls)
        for group, options in option_classes().items()
        for name, cls in options.items()
    ]


OPTIONS = _every_option()
IDS = [f"{group}={name}" for group, name, _ in OPTIONS]


def _defaults(cls: type) -> dict[str, object]:
    """The schema's default of each field that has a value (interpolations left out: they
    name another setting, not a value)."""
    values: dict[str, object] = {}
    for spec in dataclasses.fields(cls):
        if spec.default is not dataclasses.MISSING:
            value = spec.default
        elif spec.default_factory is not dataclasses.MISSING:
            value = spec.default_factory()
        else:
            continue
        if isinstance(value, enum.Enum):
            value = value.value  # as YAML writes it
        if not (isinstance(value, str) and value.startswith("${")):
            values[spec.name] = value
    return values


@pytest.mark.parametrize(("group", "name", "cls"), OPTIONS, ids=IDS)
def test_the_option_file_does_not_restate_a_default(group: str, name: str, cls: type) -> None:
    path = CONF / group / f"{name}.yaml"
    if not path.exists():
        return  # the option is the ConfigStore's entry alone
    written = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    assert isinstance(written, dict)
    restated = _restated(written, cls)
    assert not restated, f"{path.relative_to(CONF)} restates the schema's defaults of {restated}"


def _restated(written: dict, cls: type, prefix: str = "") -> list[str]:
    """The keys ``written`` sets to ``cls``'s defaults, also inside a section whose field is
    itself an options class (``logger.wandb``)."""
    defaults, types = _defaults(cls), typing.get_type_hints(cls)
    restated = []
    for key, value in written.items():
        if key in defaults and defaults[key] == value:
            restated.append(f"{prefix}{key}")
        nested = [t for t in typing.get_args(types.get(key)) or [types.get(key)] if _options(t)]
        if isinstance(value, dict) and nested:
            restated += _restated(value, nested[0], f"{prefix}{key}.")
    return restated


def _options(kind: object) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


def _target(cls: type) -> object | None:
    target = getattr(cls, "_target_", None)
    if not isinstance(target, str) or "." not in target:
        return None
    module, _, name = target.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _literal(node: ast.expr) -> bool:
    """A value written out (1, "union", [3, 32, 32], -1.0), not a name that refers to one."""
    if isinstance(node, ast.UnaryOp):
        return _literal(node.operand)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_literal(element) for element in node.elts)
    return isinstance(node, ast.Constant) and node.value is not None


def _literal_defaults(function: object) -> dict[str, str]:
    """``{parameter: source}`` of each parameter whose default is a literal."""
    init = function.__init__ if inspect.isclass(function) else function  # type: ignore[misc]
    try:
        source = textwrap.dedent(inspect.getsource(init))
    except (OSError, TypeError):
        return {}
    tree = ast.parse(source).body[0]
    assert isinstance(tree, (ast.FunctionDef, ast.AsyncFunctionDef))
    arguments = tree.args
    positional = arguments.posonlyargs + arguments.args
    with_defaults = positional[len(positional) - len(arguments.defaults) :]
    pairs = list(zip(with_defaults, arguments.defaults, strict=True))
    pairs += [
        (a, d)
        for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
        if d is not None
    ]
    return {arg.arg: ast.unparse(default) for arg, default in pairs if _literal(default)}


@pytest.mark.parametrize(("group", "name", "cls"), OPTIONS, ids=IDS)
def test_the_constructor_takes_its_defaults_from_the_options(
    group: str, name: str, cls: type
) -> None:
    built = _target(cls)
    if built is None:
        return
    defaults = _defaults(cls)
    again = {p: text for p, text in _literal_defaults(built).items() if p in defaults}
    assert not again, (
        f"{group}={name}: {cls._target_} writes the defaults of {sorted(again)} "
        f"again ({again}); take them from {cls.__name__} (or give none)"
    )
