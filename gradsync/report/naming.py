"""How runs are named in tables and legends: by the settings that differ between them, by the
keys of ``--group-by``, or by a ``--label`` template. Runs that get the same name form a group
(repeats of one setting, e.g. several seeds) and share a colour and a bar."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gradsync.report.runs import ReportError, Run, override_values

WORKERS = "trainer.workers"
_TEMPLATE_KEY = re.compile(r"\{([^{}]+)\}")


def show(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def differing_keys(runs: Sequence[Run]) -> list[str]:
    """Overridden keys (in the order first seen) whose values are not the same in every run."""
    keys: dict[str, None] = {}
    for run in runs:
        keys.update(dict.fromkeys(k for k in override_values(run.overrides)))
    return [
        key
        for key in keys
        if not key.startswith("hydra.") and len({show(run.setting(key)) for run in runs}) > 1
    ]


def short_names(keys: Sequence[str]) -> dict[str, str]:
    """``compressor.density`` → ``density``, unless two keys end the same way."""
    last = [key.rsplit(".", 1)[-1] for key in keys]
    return {
        key: name if last.count(name) == 1 else key for key, name in zip(keys, last, strict=True)
    }


@dataclass(frozen=True)
class Naming:
    keys: list[str]
    """The settings that tell runs apart: the table's leading columns."""
    labels: list[str]
    """One name per run, in the runs' order."""
    grouped: bool
    """Names come from ``--group-by``/``--label``, so several runs may share one."""

    def groups(self) -> dict[str, list[int]]:
        """Each name and the positions of its runs, in order of first appearance."""
        groups: dict[str, list[int]] = {}
        for position, label in enumerate(self.labels):
            groups.setdefault(label, []).append(position)
        return groups


def _describe(run: Run, keys: Sequence[str]) -> str:
    """The run's values of ``keys``; a key the run does not have is left out (dense runs have
    no density), "–" if that leaves nothing."""
    short = short_names(keys)
    parts = [
        show(value) if "." not in key else f"{short[key]}={show(value)}"
        for key in keys
        if (value := run.setting(key)) is not None
    ]
    return ", ".join(parts) or "–"


def _filled(template: str, run: Run) -> str:
    """``--label``'s template with each {key} replaced by the run's setting."""
    return _TEMPLATE_KEY.sub(lambda m: show(run.setting(m.group(1))), template)


def _check_known(runs: Sequence[Run], keys: Sequence[str], option: str) -> None:
    for key in keys:
        if all(run.setting(key) is None for run in runs):
            hint = ", ".join(differing_keys(runs)) or "none differ"
            raise ReportError(
                f"{option}: no run has a setting '{key}' (settings that differ: {hint}); use "
                "config keys such as compressor or trainer.workers"
            )


def name_runs(
    runs: Sequence[Run], *, group_by: Sequence[str] = (), template: str | None = None
) -> Naming:
    keys = differing_keys(runs)
    if template is not None:
        _check_known(runs, _TEMPLATE_KEY.findall(template), "--label")
        labels = [_filled(template, run) for run in runs]
        return Naming(keys, labels, grouped=True)
    if group_by:
        _check_known(runs, group_by, "--group-by")
        return Naming(keys, [_describe(run, group_by) for run in runs], grouped=True)
    labels = [_describe(run, keys) if keys else _short_path(run) for run in runs]
    seen = [label for label in labels if labels.count(label) > 1]
    labels = [
        f"{label} ({_short_path(run)})" if label in seen else label
        for label, run in zip(labels, runs, strict=True)
    ]
    return Naming(keys, labels, grouped=False)


def _short_path(run: Run) -> str:
    """A sweep job as ``sweep/3``, any other run by its directory name."""
    path = run.path
    return f"{path.parent.name}/{path.name}" if path.name.isdigit() else path.name


def method_of(run: Run, keys: Sequence[str]) -> str:
    """The run's name with its worker count left out: one line of the scaling plot."""
    rest = [k for k in keys if k != WORKERS]
    return _describe(run, rest) if rest else "all runs"
