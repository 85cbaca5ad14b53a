"""Files and directories a command is given, checked before anything runs: each problem is one
line that names the setting to change."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from omegaconf import OmegaConf

CONFIG_MODULE = "gradsync.conf"
"""Where Hydra finds the config groups: ``conf/`` of the repository, installed as this module
(``pyproject.toml``)."""
ROOT_CONFIG = "train"
KEYLESS_GROUP = "experiment"
"""Its options (recipes) set other groups' options and keys and have none of their own."""
ROOT_CONFIG_FILE = Path(str(resources.files(CONFIG_MODULE) / f"{ROOT_CONFIG}.yaml"))


def output_dir_problem(overrides: Sequence[str], *, sweep: bool) -> str | None:
    """Why the run's (or sweep's) output directory cannot be created; None when it can. Its
    part before the first interpolation (``${now:...}``) is what is probed."""
    key = "hydra.sweep.dir" if sweep else "hydra.run.dir"
    given = [
        value.strip("'\"")
        for name, _, value in (text.partition("=") for text in overrides)
        if name.lstrip("+~") == key
    ]
    text = given[-1] if given else _default_output(key)
    problem = writable_dir_problem(Path(text.split("${", 1)[0] or "."))
    return None if problem is None else f"{key}={text}: {problem}; choose another {key}"


def _default_output(key: str) -> str:
    """Where Hydra writes when no override says: the root config's setting, unresolved."""
    node: object = OmegaConf.to_container(OmegaConf.load(ROOT_CONFIG_FILE), resolve=False)
    for part in key.split("."):
        assert isinstance(node, dict), f"the root config has no section above {part!r}"
        node = node[part]
    return str(node)


def writable_dir_problem(path: Path) -> str | None:
    """Why a directory cannot be made at ``path`` (or written in, if it exists); None when it
    can. Probes by making (and removing) a directory in the nearest one that exists, so nothing
    is left behind."""
    existing = path.absolute()
    try:
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            return f"{existing} is a file, not a directory"
        os.rmdir(tempfile.mkdtemp(prefix=".gradsync-probe-", dir=existing))
    except OSError as exc:  # no permission to look (or to make one) there
        return f"cannot create a directory in {existing} ({exc.strerror})"
    return None
