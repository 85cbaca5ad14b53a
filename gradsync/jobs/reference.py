"""What every config group, option and key means, read from where each is defined.

One source feeds ``gradsync run GROUP=OPTION --help`` and the documentation's configuration
reference (``make reference``), so neither can drift from the schemas:

- a key's meaning is the docstring under its field in the option's schema (a dataclass in
  ``gradsync/config/schema.py`` or a family's options), its
  default is the composed option's value (the YAML file may change the schema's), its type the
  field's annotation;
- an option's meaning is its scheduler's registry ``summary``, its compressor options' class
  docstring, or else the comment that opens its YAML file in ``conf/<group>/``.

The reference page is committed (``docs/reference/config.md``, readable without building the
site); ``make reference`` rewrites it, and the docs build and a test fail while it is stale.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import re
import textwrap
import typing
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from gradsync import families
from gradsync.compressors.options.base import CompressorConfig
from gradsync.compressors.registry import COMPRESSORS
from gradsync.compressors.registry import summary as compressor_summary
from gradsync.config.files import CONFIG_MODULE, KEYLESS_GROUP, ROOT_CONFIG, ROOT_CONFIG_FILE
from gradsync.config.schema import TrainConfig, TrainerConfig
from gradsync.jobs.discovery import group_options
from gradsync.jobs.pairing import pairing_problem
from gradsync.projection.cluster_spec import (
    AlphaBetaSpec,
    ClusterSpec,
    ModelComputeSpec,
    SelectionSpec,
)
from gradsync.schedulers.registry import SCHEDULERS

GROUP_MEANINGS: dict[str, str] = {
    "model": "The network trained.",
    "dataset": "The data, its loader and its test split.",
    "compressor": "What each worker sends of its gradient.",
    "feedback": "What a worker keeps of what its compressor did not send (error feedback).",
    "scheduler": "When and how the workers exchange: the order, grouping and timing of the "
    "collectives, or parameter servers.",
    "trainer": "The optimization and the job's shape: workers, device, precision, optimizer, "
    "schedule, checkpoints.",
    "runner": "Where the worker processes start: this host, an emulated network, Slurm, torchrun.",
    "logger": "Where metrics go besides the run directory.",
    "experiment": "Named recipes that set several groups and keys at once.",
}
"""One line per config group, for the reference (a test requires one for every group)."""


@dataclass(frozen=True)
class KeyDoc:
    key: str
    """The dotted key as given on the command line (``compressor.density``)."""
    type: str
    default: str
    meaning: str
    """The field's docstring, as one paragraph ("" when it has none)."""

    @property
    def summary(self) -> str:
        return first_sentence(self.meaning)

    @property
    def derived(self) -> bool:
        """Its default is computed from other keys (an interpolation)."""
        return self.default.startswith("${")


@dataclass(frozen=True)
class OptionDoc:
    group: str
    option: str
    meaning: str
    """What the option is (a paragraph; its first sentence is its summary)."""
    keys: tuple[KeyDoc, ...]
    settings: tuple[str, ...] = ()
    """What a recipe (an experiment) sets, as overrides; () for other options."""

    @property
    def summary(self) -> str:
        return first_sentence(self.meaning)


_ABBREVIATIONS = ("e.g.", "i.e.", "cf.", "vs.", "et al.")


def first_sentence(text: str) -> str:
    """The text's first sentence, on one line."""
    flat = " ".join(text.split())
    for match in re.finditer(r"(?<=[.!?])\s+", flat):
        if not flat[: match.start()].endswith(_ABBREVIATIONS):
            return flat[: match.start()]
    return flat


@cache
def _own_field_docs(cls: type) -> dict[str, str]:
    """The docstrings under the fields ``cls`` itself defines (attribute docstrings, which
    Python keeps only in the source)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    tree = ast.parse(source).body[0]
    if not isinstance(tree, ast.ClassDef):
        return {}
    docs: dict[str, str] = {}
    for statement, following in zip(tree.body, tree.body[1:], strict=False):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[statement.target.id] = _plain(following.value.value)
    return docs


def _plain(text: str) -> str:
    """A docstring or comment as one paragraph, its reST ````code```` as Markdown's `code`."""
    return " ".join(inspect.cleandoc(text).replace("``", "`").split())


def field_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` of a schema, its bases' fields included (a subclass's wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        docs.update(_own_field_docs(klass))
    return docs


def user_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields a user sets: not Hydra's ``_target_``/``_partial_``."""
    return [f for f in dataclasses.fields(cls) if not f.name.startswith("_")]


def _type_text(cls: type, name: str, annotation: object) -> str:
    try:
        hint = typing.get_type_hints(cls)[name]
    except Exception:  # forward references only the type checker resolves: show the text
        return str(annotation)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return " | ".join(str(member.value) for member in hint)
    return str(annotation)


def _value_text(value: Any) -> str:
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def schema_keys(cls: type, node: DictConfig, prefix: str) -> list[KeyDoc]:
    """Every key of ``cls`` under ``prefix``, with its value in ``node`` as written (``${...}``
    unresolved); a nested schema's keys follow under its own name."""
    docs = field_docs(cls)
    written = OmegaConf.to_container(node, resolve=False, enum_to_str=True)
    assert isinstance(written, dict)
    keys: list[KeyDoc] = []
    for f in user_fields(cls):
        key = f"{prefix}.{f.name}"
        child = node._get_node(f.name)  # not node[...]: a required key has no value to read
        nested = OmegaConf.get_type(node, f.name) if isinstance(child, DictConfig) else None
        if nested is not None and dataclasses.is_dataclass(nested):
            keys.append(KeyDoc(key, str(f.type), "(below)", docs.get(f.name, "")))
            keys += schema_keys(nested, node[f.name], key)
            continue
        text = _value_text(written[f.name])
        keys.append(KeyDoc(key, _type_text(cls, f.name, f.type), text, docs.get(f.name, "")))
    return keys


def _yaml_comment(group: str, option: str) -> str:
    """The comment that opens ``conf/<group>/<option>.yaml`` (Hydra's ``@package`` line aside),
    as one paragraph."""
    path = ROOT_CONFIG_FILE.parent / group / f"{option}.yaml"
    lines: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if not text.startswith("@package"):
            lines.append(text)
    return _plain(" ".join(lines))


def recipe_settings(option: str) -> list[str]:
    """What ``experiment=option`` sets, as command-line overrides (``model=cnn``,
    ``trainer.workers=4``), in its YAML file's order."""
    recipe = OmegaConf.to_container(
        OmegaConf.load(ROOT_CONFIG_FILE.parent / KEYLESS_GROUP / f"{option}.yaml"), resolve=False
    )
    assert isinstance(recipe, dict)
    settings: list[str] = []
    for entry in recipe.pop("defaults", []):
        chosen = entry.items() if isinstance(entry, dict) else []  # "override /model": cnn
        settings += [f"{str(group).split('/')[-1]}={value}" for group, value in chosen]
    tree = {str(key): value for key, value in recipe.items()}
    return settings + [f"{key}={_value_text(value)}" for key, value in _dotted(tree)]


def _dotted(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    pairs: list[tuple[str, Any]] = []
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            pairs += _dotted(value, f"{prefix}{key}.")
        else:
            pairs.append((f"{prefix}{key}", value))
    return pairs


def option_meaning(group: str, option: str) -> str:
    if group == "scheduler":
        return SCHEDULERS[option].summary
    if group == "compressor":
        return _plain(compressor_summary(option))
    return _yaml_comment(group, option)


def compose_options(choices: dict[str, str]) -> DictConfig:
    """The root config with ``group=option`` chosen for each of ``choices`` (not resolved, not
    checked: composing alone never refuses a combination)."""
    families.register()
    GlobalHydra.instance().clear()
    overrides = [f"{group}={option}" for group, option in choices.items()]
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        return compose(ROOT_CONFIG, overrides=overrides)


def _option_doc(cfg: DictConfig | None, group: str, option: str) -> OptionDoc:
    """``group=option``'s doc from a config in which it is chosen. An experiment (``cfg``
    None) has no keys of its own: it sets other groups' (its YAML shows which)."""
    keys: tuple[KeyDoc, ...] = ()
    schema = None if cfg is None else OmegaConf.get_type(cfg, group)
    if cfg is not None and schema is not None and dataclasses.is_dataclass(schema):
        keys = tuple(schema_keys(schema, cfg[group], group))
    settings = tuple(recipe_settings(option)) if group == KEYLESS_GROUP else ()
    return OptionDoc(group, option, option_meaning(group, option), keys, settings)


def option_doc(group: str, option: str) -> OptionDoc:
    """What ``group=option`` is and every key it has."""
    cfg = None if group == KEYLESS_GROUP else compose_options({group: option})
    return _option_doc(cfg, group, option)


def cluster_file_keys() -> list[KeyDoc]:
    """Every key of a cluster description (``projection/cluster_spec.py``), an entry of its
    ``selection``, of its collectives' lists and of its per-job ``models`` included."""
    keys = _file_keys(ClusterSpec, "")
    keys += _file_keys(SelectionSpec, "selection.<compressor>")
    keys += _file_keys(AlphaBetaSpec, "collectives.<collective>[]")
    keys += _file_keys(ModelComputeSpec, "models[]")
    return keys


def _file_keys(cls: type, prefix: str) -> list[KeyDoc]:
    found = schema_keys(cls, OmegaConf.structured(cls), prefix)
    return [dataclasses.replace(key, key=key.key.removeprefix(".")) for key in found]


def root_keys() -> list[KeyDoc]:
    """The run-level keys (not in a group), such as ``name``."""
    docs = field_docs(TrainConfig)
    defaults = OmegaConf.to_container(OmegaConf.structured(TrainConfig), resolve=False)
    assert isinstance(defaults, dict)
    return [
        KeyDoc(
            f.name,
            _type_text(TrainConfig, f.name, f.type),
            _value_text(defaults[f.name]),
            docs.get(f.name, ""),
        )
        for f in user_fields(TrainConfig)
        if f.name not in GROUP_MEANINGS
    ]


def all_option_docs() -> dict[str, list[OptionDoc]]:
    """``{group: [OptionDoc, ...]}`` for every user-facing group and option."""
    groups = {g: options for g, options in group_options().items() if g != KEYLESS_GROUP}
    docs: dict[str, list[OptionDoc]] = {group: [] for group in group_options()}
    # One composition chooses the i-th option of every group at once: a dozen compositions
    # instead of one per option.
    for i in range(max(len(options) for options in groups.values())):
        choices = {g: options[i] for g, options in groups.items() if i < len(options)}
        cfg = compose_options(choices)
        for group, option in choices.items():
            docs[group].append(_option_doc(cfg, group, option))
    for option in group_options().get(KEYLESS_GROUP, []):
        docs[KEYLESS_GROUP].append(_option_doc(None, KEYLESS_GROUP, option))
    return docs


def undocumented(docs: dict[str, list[OptionDoc]]) -> list[str]:
    """Every option and key that has no meaning written down, as ``group=option`` or a key."""
    missing: list[str] = []
    for group, options in docs.items():
        if group not in GROUP_MEANINGS:
            missing.append(f"group {group}")
        for option in options:
            if not option.meaning:
                missing.append(f"{group}={option.option}")
            missing += [
                f"{key.key} ({group}={option.option})" for key in option.keys if not key.meaning
            ]
    return missing


_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_MARKDOWN_SPECIAL = re.compile(r"([\\*_<>\[\]|])")


def markdown_text(text: str) -> str:
    """``text`` as Markdown shows it literally: its `code` spans kept, Markdown and HTML
    characters elsewhere escaped (``<class>``, ``a*b*c``)."""
    out, at = [], 0
    for match in _CODE_SPAN.finditer(text):
        out.append(_MARKDOWN_SPECIAL.sub(r"\\\1", text[at : match.start()]))
        out.append(match.group(0).replace("|", "\\|"))
        at = match.end()
    out.append(_MARKDOWN_SPECIAL.sub(r"\\\1", text[at:]))
    return "".join(out)


def _escape_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code_cell(text: str) -> str:
    return f"`{text}`" if text else ""


def reference_markdown(docs: dict[str, list[OptionDoc]], method_pages: dict[str, str]) -> str:
    """The configuration reference page: every group, option and key. ``method_pages`` maps
    ``group=option`` to the page (relative to the reference) that explains the method."""
    out = [
        "# Configuration reference",
        "",
        "Generated from the schemas (`gradsync/config/schema.py` and every family's options, "
        "`gradsync/families.py`) and the options' YAML files in `conf/`, as "
        "`gradsync run GROUP=OPTION --help` shows them. Set a key with `key=value` on the "
        "command line; choose an option with `group=option`.",
        "",
        "## Run-level keys",
        "",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
    ]
    out += [_key_row(key) for key in root_keys()]
    out += [
        "",
        "## Cluster description",
        "",
        "A cluster `gradsync simulate --cluster FILE.yaml` predicts for, when it is not the "
        "job's own (see [Predicting runs](../guide/simulate.md#a-cluster-you-do-not-have)). "
        "Every key is optional.",
        "",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
        *(_key_row(key) for key in cluster_file_keys()),
    ]
    for group, options in docs.items():
        out += ["", f"## {group}", "", GROUP_MEANINGS.get(group, ""), ""]
        for option in options:
            out += ["", f"### {group}={option.option}", ""]
            page = method_pages.get(f"{group}={option.option}")
            meaning = markdown_text(option.meaning.rstrip())
            if page:
                stop = "" if meaning.endswith((".", "!", "?")) else "."
                meaning += f"{stop} See [{option.option}]({page})."
            out += [meaning, ""]
            if option.settings:
                out += ["Sets " + ", ".join(f"`{s}`" for s in option.settings) + ".", ""]
            if option.keys:
                out += ["| key | type | default | meaning |", "|---|---|---|---|"]
                out += [_key_row(key) for key in option.keys]
    return "\n".join(out) + "\n"


def _key_row(key: KeyDoc) -> str:
    cells = [
        _code_cell(key.key),
        _escape_cell(_code_cell(key.type)),
        _escape_cell(_code_cell(key.default)),
        markdown_text(key.meaning),
    ]
    return "| " + " | ".join(cells) + " |"


METHOD_GROUPS = ("compressor", "scheduler")
"""Groups whose options each have a methods page, ``docs/methods/<group>s/<option>.md``."""
REFERENCE_PAGE = Path("reference") / "config.md"
"""Where the reference lives under the documentation's folder."""


def method_pages(docs_dir: Path) -> dict[str, str]:
    """``group=option`` to its methods page, relative to the reference page."""
    return {
        f"{group}={page.stem}": f"../methods/{group}s/{page.name}"
        for group in METHOD_GROUPS
        for page in sorted((docs_dir / "methods" / f"{group}s").glob("*.md"))
        if page.stem != "index"
    }


def reference_page(docs_dir: Path) -> str:
    """The configuration reference as ``docs_dir``'s page should read."""
    return reference_markdown(all_option_docs(), method_pages(docs_dir))


# ---- what each scheduler takes: a table of the methods' index ----------------------------------
METHODS_INDEX = Path("methods") / "index.md"
TAKES_BEGIN = "<!-- What each scheduler takes: written by `make reference`. -->"
TAKES_END = "<!-- End of what make reference writes. -->"


def takes_table() -> str:
    """Which compressors (with their defaults, and with the setting that makes their payloads
    add up) each scheduler takes, as the config checks decide (``pairing.py``)."""
    cases = [case for name, cls in COMPRESSORS.items() for case in _compressor_cases(name, cls)]
    rows = ["| scheduler | takes | refuses |", "|---|---|---|"]
    for scheduler, spec in SCHEDULERS.items():
        takes = {
            shown: pairing_problem(spec, options, name) is None for name, shown, options in cases
        }
        refuses = [shown for shown, ok in takes.items() if not ok]
        taken = ", ".join(shown for shown, ok in takes.items() if ok) or "—"
        listed = taken if refuses else "every compressor"
        rows.append(f"| `{scheduler}` | {listed} | {', '.join(refuses) or '—'} |")
    return "\n".join(rows)


def _compressor_cases(name: str, cls: type) -> list[tuple[str, str, CompressorConfig]]:
    """(option, as the table shows it, its options): with its defaults, and where its
    payloads add up only with a setting (``add_up_with``), with that setting too."""
    root = OmegaConf.create({"trainer": OmegaConf.structured(TrainerConfig)})
    root.compressor = OmegaConf.structured(cls)  # its interpolations resolve in the job
    options = OmegaConf.to_object(root.compressor)
    assert isinstance(options, CompressorConfig)
    cases = [(name, f"`{name}`", options)]
    setting = options.add_up_with
    if setting and not options.adds_up():
        key, _, value = setting.removeprefix("compressor.").partition("=")
        adding = dataclasses.replace(cast(Any, options), **{key: value})  # each is a dataclass
        cases.append((name, f"`{name}` with `{setting}`", adding))
    return cases


def with_takes_table(index: str) -> str:
    """The methods index ``index`` with its generated table as the checks decide now."""
    before, _, rest = index.partition(TAKES_BEGIN)
    _, _, after = rest.partition(TAKES_END)
    return f"{before}{TAKES_BEGIN}\n{takes_table()}\n{TAKES_END}{after}"


def stale_reference(docs_dir: Path) -> str | None:
    """Why the committed reference page, or the methods index's generated table, differs from
    the schemas and registries; None when neither does."""
    page = docs_dir / REFERENCE_PAGE
    if not (page.exists() and page.read_text(encoding="utf-8") == reference_page(docs_dir)):
        return f"{page} is out of date with the schemas and YAML files: run `make reference`"
    index = (docs_dir / METHODS_INDEX).read_text(encoding="utf-8")
    if TAKES_BEGIN not in index or with_takes_table(index) != index:
        return (
            f"{docs_dir / METHODS_INDEX} is out of date with the registries: run `make reference`"
        )
    return None


if __name__ == "__main__":  # make reference: python -m gradsync.jobs.reference DOCS_DIR
    import sys

    docs = Path(sys.argv[1])
    (docs / REFERENCE_PAGE).write_text(reference_page(docs), encoding="utf-8")
    index = docs / METHODS_INDEX
    index.write_text(with_takes_table(index.read_text(encoding="utf-8")), encoding="utf-8")
