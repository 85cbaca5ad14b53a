"""The shell commands of README.md and docs/, and how each is checked, so examples cannot rot.

Every line of a fenced ```` ```bash ```` block is one command (a trailing ``\\`` continues it;
``# comments`` are dropped). Each is checked by what it runs:

- ``gradsync run ...`` (also under ``sudo`` or ``torchrun ... -m gradsync``): its arguments are
  parsed and every job of it is composed and checked as ``gradsync run`` does before starting
  anything, except for what depends on the machine (GPUs, dataset files, root, sbatch);
  ``--help`` and ``--cfg`` commands run in full;
- ``gradsync report|simulate|plan|sweep ...``: their arguments are parsed by the command's own
  parser (paths may be placeholders), and the jobs they describe composed and checked;
- ``torchrun ...``: also torchrun's own argument parser;
- ``make TARGET``: the Makefile has the target (``make -n``);
- ``scripts/...``: the script exists, parses (``bash -n``), and its overrides after ``--`` are
  checked as a ``gradsync run -m``;
- ``python -m MODULE``: the module exists;
- environment lines (``cd``, ``export``, ``source``, ``module``, ``pip``) are the reader's
  cluster setup and are not run. ``VAR=value`` settings before a command are dropped.

A block right after the line ``<!-- docs-check: run -->`` is also run for real, its commands one
after another in one fresh directory, and each must exit 0. Shell blocks must be marked
``bash``: a ``sh``, ``shell`` or ``console`` block fails its check.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_MARKER = "<!-- docs-check: run -->"
ENVIRONMENT = ("cd", "export", "source", "module", "pip")
UNCHECKED_FENCES = ("sh", "shell", "console", "zsh", "shell-session")
"""Fences of shell commands the checker does not read: refused, so none goes unchecked."""
_SETTING = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
GENERATED = ("docs/reference/config.md",)


@dataclass(frozen=True)
class DocCommand:
    path: str
    """The document, relative to the repository."""
    line: int
    words: tuple[str, ...]
    runs: bool
    """Its block is marked to be run for real."""
    block: int
    """Which fenced block of its document it is in (the commands of one block run together)."""

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def documents() -> list[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in pages if str(p.relative_to(ROOT)) not in GENERATED]


def commands(path: Path, root: Path = ROOT) -> Iterator[DocCommand]:
    lines = path.read_text(encoding="utf-8").splitlines()
    where = str(path.relative_to(root))
    inside, runs, previous, block = False, False, "", 0
    pending: list[str] = []
    start = 0
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not inside:
            fence = stripped[3:].strip() if stripped.startswith("```") else None
            if fence == "bash":
                inside, runs, block, pending = True, previous == RUN_MARKER, block + 1, []
            elif fence in UNCHECKED_FENCES:
                yield DocCommand(where, number, (f"```{fence}",), False, block)
            if stripped:
                previous = stripped
            continue
        if stripped.startswith("```"):
            inside = False
            continue
        if not pending:
            start = number
        pending.append(stripped.removesuffix("\\"))
        if stripped.endswith("\\"):
            continue
        text, pending = " ".join(pending), []
        for words in _split_chain(shlex.split(text, comments=True)):
            yield DocCommand(where, start, tuple(words), runs, block)


def without_settings(words: list[str]) -> list[str]:
    """The command without its leading ``VAR=value`` settings and ``sudo [-flags]``."""
    while words and _SETTING.match(words[0]):
        words = words[1:]
    if words[:1] == ["sudo"]:
        words = words[1:]
        while words and words[0].startswith("-"):
            words = words[1:]
    return words


def _split_chain(words: list[str]) -> Iterator[list[str]]:
    """``a && b`` as two commands."""
    current: list[str] = []
    for word in words:
        if word == "&&":
            yield current
            current = []
        else:
            current.append(word)
    if current:
        yield current


def check(command: DocCommand) -> None:
    """Raise AssertionError (or the command's own one-line error) when ``command`` is wrong."""
    words = without_settings(list(command.words))
    assert words, f"{command.where}: no command"
    program = words[0]
    assert not program.startswith("```"), (
        f"{command.where}: mark shell blocks ```bash, so their commands are checked"
    )
    if program in ENVIRONMENT:
        return
    if program == "gradsync":
        _check_gradsync(words[1:])
    elif program == "torchrun":
        _check_torchrun(words[1:])
    elif program == "make":
        _check_make(words[1:])
    elif program.startswith("scripts/"):
        _check_script(words)
    elif program in ("python", "python3") and words[1:2] == ["-m"] and len(words) > 2:
        _check_module(words[2])
    else:
        raise AssertionError(
            f"{command.where}: no check for {program!r}; use a checked program "
            "(tests/helpers/doc_commands.py) or a ```text block"
        )


def _check_gradsync(args: list[str]) -> None:
    if not args or args[0].startswith("-") or "--help" in args or "-h" in args:
        _in_process(["gradsync", *args])  # the help: printed in full
        return
    command, rest = args[0], args[1:]
    checks = {
        "run": _check_run,
        "report": _check_report,
        "simulate": _check_simulate,
        "plan": _check_plan,
        "sweep": _check_sweep,
    }
    assert command in checks, f"gradsync has no command {command!r}"
    checks[command](rest)


def _in_process(argv: list[str]) -> None:
    """Run a command that only prints (help, a composed config) in full."""
    from gradsync.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        code = main(argv[1:])
    assert code == 0, f"{shlex.join(argv)} exited {code}"


def _check_run(args: list[str]) -> None:
    from gradsync.cli.run_args import parse_run_args
    from gradsync.jobs.compose import compose_jobs, launcher_overrides

    run = parse_run_args(args)
    assert run is not None
    if run.prints_only:
        _in_process(["gradsync", "run", *args])  # --cfg, --info: printed in full
        return
    assert not run.hydra_only, "-cp/-cn/-cd/--shell-completion name another config: not checked"
    jobs = compose_jobs(run.overrides, multirun=run.multirun, launcher_here=False, machine=False)
    launcher_overrides(jobs)  # a Slurm sweep's resources must agree across its jobs


def _check_report(args: list[str]) -> None:
    from gradsync.cli.report import _parser

    assert _parser().parse(args) is not None


OWNED = ("compressor.", "scheduler.")


def _check_simulate(args: list[str]) -> None:
    """Its own parser, every compressor × scheduler it compares composed (the compressor and
    scheduler options going to those that have them), and the cluster it describes."""
    from gradsync.cli import simulate
    from gradsync.cli.simulate_cluster import described, machines
    from gradsync.jobs.alternatives import Alternative, applies, check_somebody_has, swept

    parsed = simulate._parser().parse(args)
    assert parsed is not None
    compressors = simulate._chosen(parsed.compressors, "compressor")
    schedulers = simulate._chosen(parsed.schedulers, "scheduler")
    # Every option checked against every pair; composed with the compressors that own one
    # (or the first) and the first scheduler: a second, not every pair's composition.
    fixed, axes = swept(parsed.overrides)
    given = [o for o in [*fixed, *(values[0] for values in axes)] if o.startswith(OWNED)]
    pairs = [Alternative(c, s) for c in compressors for s in schedulers]
    check_somebody_has(given, pairs)
    owners = [
        c for c in compressors if any(applies(o, Alternative(c, schedulers[0])) for o in given)
    ]
    simulate.combinations(
        [o for o in parsed.overrides if not o.startswith("scheduler.")],
        owners or compressors[:1],
        schedulers[:1],
    )
    machines(described(parsed), simulate._chosen(None, "compressor"), parsed.compute_scale)


def _check_plan(args: list[str]) -> None:
    _check_job_command("plan", args)


def _check_job_command(command: str, args: list[str]) -> None:
    """A command that describes one job by overrides: its own parser, then the job composed."""
    import importlib

    from gradsync.jobs.compose import compose_jobs

    parsed = importlib.import_module(f"gradsync.cli.{command}")._parser().parse(args)
    assert parsed is not None
    compose_jobs(parsed.overrides, multirun=False, launcher_here=False, machine=False)


def _check_sweep(args: list[str]) -> None:
    from gradsync.cli.sweep import _parser

    parsed = _parser().parse(args)
    assert parsed is not None
    if parsed.list is not None:
        _check_run(["-m", *parsed.list])


def _check_torchrun(args: list[str]) -> None:
    from torch.distributed.run import get_args_parser

    parsed = get_args_parser().parse_args(args)
    assert parsed.module and parsed.training_script == "gradsync", (
        "torchrun must start gradsync as a module: torchrun ... -m gradsync run ..."
    )
    assert parsed.training_script_args[:1] == ["run"]
    _check_run(parsed.training_script_args[1:])


def _check_make(args: list[str]) -> None:
    targets = [a for a in args if not a.startswith("-") and "=" not in a]
    done = subprocess.run(
        ["make", "-n", *targets], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"make {' '.join(targets)}: {done.stderr.strip()}"


def _check_script(words: list[str]) -> None:
    script = ROOT / words[0]
    assert script.is_file(), f"no script {words[0]}"
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    if "--" in words:
        _check_run(["-m", *words[words.index("--") + 1 :]])


def _check_module(name: str) -> None:
    import importlib.util

    assert importlib.util.find_spec(name) is not None, f"no module {name}"
