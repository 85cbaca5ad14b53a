"""Every command, given bad input as a new user types it: exit code 2, one line on stderr that
names what to change, no traceback, nothing written, no process left running.

The commands run as the installed ``gradsync``, each in an empty directory of its own, a few at
a time (they are independent), against files in the real formats: a run directory written by
``gradsync run``, a damaged copy of it, an empty directory, a plain file, a file that is not
JSON.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from gradsync.cluster.host_checks import missing_sbatch

MARKER = "GRADSYNC_BAD_INPUT_CASE"
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")

# (arguments, what the one line must say); {name} is a path under the fixture's directory.
CASES = [
    # run: values, keys, options
    (["run", "compressor=topkk"], "unknown compressor 'topkk'; valid options: bf16"),
    (["run", "trainer.wrkers=2"], "unknown key 'trainer.wrkers'; valid keys in trainer"),
    (["run", "trainer.workers=two"], "trainer.workers=two: Value 'two'"),
    (["run", "trainer.workers=0"], "trainer.workers must be >= 1, got 0"),
    (["run", "trainer.batch_size=100000"], "the training set has 1438 samples, fewer than one"),
    (["run", "compressor=randomk", "compressor.density=2"], "compressor.density must be in"),
    (["run", "trainer.lr=0.1,0.2"], "add -m to sweep over them"),
    (["run", "--bogus"], "unknown option --bogus; see gradsync run --help"),
    (["run", "--cfg"], "argument -c/--cfg: expected one argument"),
    (["run", "--cfg", "everything"], "invalid choice: 'everything'"),
    (["run", "-m", "trainer.lr=0.1,0.2", "--cfg", "hydra"], "cannot be combined with -m; drop -m"),
    (["run", "-m", "compressor=topk,nope"], "unknown compressor 'nope'"),
    # run: impossible combinations, this machine
    (["run", "scheduler=osp", "compressor=topk"], "use compressor=none"),
    (["run", "compressor=dgc", "trainer.nesterov=true"], "set trainer.nesterov=false"),
    (  # more processes than cores: the mismatch is found before the model is sized
        ["run", "model=gpt2", "dataset=digits", "trainer.workers=4"],
        "pick a matching model= / dataset= pair",
    ),
    (["run", "trainer.workers=1000"], "force it with trainer.allow_oversubscribe=true"),
    (
        ["run", "runner=slurm", "runner.partition=nope"],
        # Asked of Slurm (sbatch --test-only): a cluster, or a host that is none, refuses it.
        "Slurm refuses the jobs' resources" if missing_sbatch() is None else "sbatch on PATH",
    ),
    pytest.param(["run", "trainer.device=cuda"], "use trainer.device=cpu", marks=NO_CUDA),
    # run: files and directories
    (["run", "hydra.run.dir=/proc/gradsync"], "choose another hydra.run.dir"),
    (["run", "hydra.run.dir={file}/run"], "is a file, not a directory"),
    (
        ["run", "-m", "trainer.lr=0.1,0.2", "hydra.sweep.dir=/proc/gradsync"],
        "choose another hydra.sweep.dir",
    ),
    (["run", "trainer.resume={missing}"], "does not exist"),
    (["run", "trainer.resume={empty}"], "holds no checkpoint"),
    (["run", "scheduler=omgs", "scheduler.costs={not_json}"], "scheduler.costs: "),
    (["run", "scheduler=deft", "scheduler.times={missing}.json"], "scheduler.times: no file"),
    (["frobnicate"], "unknown command 'frobnicate'; valid commands: run"),
    # sweep
    (["sweep"], "usage: gradsync sweep --list"),
    (["sweep", "--list", "compressor=nope"], "unknown compressor 'nope'"),
    (["sweep", "--summarize", "{missing}"], "does not exist"),
    (["sweep", "--summarize", "{file}"], "is a file; give the sweep's directory"),
    (["sweep", "--summarize", "{empty}"], "holds no jobs"),
    # report
    (["report"], "required: PATH"),
    (["report", "{missing}"], "is not a directory; give run or sweep directories"),
    (["report", "{empty}"], "no runs under"),
    (["report", "{damaged}"], "summary.json is damaged"),
    (["report", "{good}", "--target-accuracy", "abc"], "argument --target-accuracy"),
    (["report", "{good}", "--group-by", "compressor", "--label", "x"], "not both"),
    (["report", "{good}", "--out", "/proc/gradsync"], "give another --out"),
    # plan
    (["plan"], "add scheduler=omgs"),
    (["plan", "scheduler=omgs", "scheduler.costs={not_json}"], "is not JSON"),
    (["plan", "--bogus"], "unknown option --bogus; see gradsync plan --help"),
    # simulate
    (["simulate", "--workers", "abc"], "'abc' is not a list of worker counts"),
    (["simulate", "--compressors", "zip"], "unknown compressor zip"),
    (["simulate", "--plot", "out.txt"], "the file must end in .png"),
    (["simulate", "--measurements", "{not_json}"], "--measurements"),
    (["simulate", "trainer.workers=512"], "pass --workers 512"),
    (["simulate", "--bogus"], "unknown option --bogus; see gradsync simulate --help"),
    # run: resuming a checkpoint of another job (the good run's: model=cnn)
    (
        ["run", "trainer.resume={good}", "model=mlp"],
        "was written with model=cnn, this job has model=mlp: resume with model=cnn, or start a "
        "new run",
    ),
    # run, simulate: a model that cannot take its dataset's inputs (tried on the meta device)
    (
        ["run", "model=cnn", "dataset=synthetic", "dataset.image_shape=[3,1,1]"],
        "model=cnn cannot take dataset=synthetic's inputs of shape [3, 1, 1] at "
        "trainer.batch_size=32: Given input size: (32x1x1). Calculated output size: (32x0x0). "
        "Output size is too small; change dataset.image_shape, or choose another model",
    ),
    (
        [
            "simulate",
            "--compressors",
            "none",
            "--schedulers",
            "allreduce",
            "model=cnn",
            "dataset=synthetic",
            "dataset.image_shape=[3,1,1]",
        ],
        "model=cnn cannot take dataset=synthetic's inputs of shape [3, 1, 1]",
    ),
]


def _case_id(case) -> str:
    args = case.values[0] if hasattr(case, "values") else case[0]
    return " ".join(args)


IDS = [_case_id(case) for case in CASES]


def _tree(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def _processes_with(variable: str) -> list[int]:
    """Processes whose environment holds ``variable`` (NAME=value) exactly."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and variable.encode() in (proc / "environ").read_bytes().split(
                b"\0"
            ):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def inputs(written_run, tmp_path_factory) -> dict[str, Path]:
    """The files the cases point at, in the formats gradsync reads."""
    root = tmp_path_factory.mktemp("inputs")
    good = root / "good"
    shutil.copytree(written_run, good)
    damaged = root / "damaged"
    shutil.copytree(good, damaged)
    summary = (damaged / "summary.json").read_text()
    (damaged / "summary.json").write_text(summary[: len(summary) // 2])  # cut short
    (root / "empty").mkdir()
    (root / "file").write_text("not a directory\n")
    (root / "not_json").write_text("gamma: 1\n")
    return {
        "root": root,
        **{name: root / name for name in ("good", "damaged", "empty", "file", "not_json")},
        "missing": root / "missing",
    }


@pytest.fixture(scope="module")
def outcomes(gradsync_cmd, module_cli_env, inputs, tmp_path_factory) -> dict[str, dict]:
    """Every case run once, a few at a time; what each left behind is looked at as it ends."""
    before = _tree(inputs["root"])

    def run(case_id: str, args: list[str]) -> dict:
        cwd = tmp_path_factory.mktemp("cwd")
        env = {**module_cli_env, MARKER: case_id}
        argv = [arg.format(**inputs) for arg in args]
        result = subprocess.run(
            [*gradsync_cmd, *argv],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        return {
            "result": result,
            "left_in_cwd": os.listdir(cwd),
            "running": _processes_with(f"{MARKER}={case_id}"),
        }

    cases = [c.values if hasattr(c, "values") else c for c in CASES]
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {i: pool.submit(run, i, case[0]) for i, case in zip(IDS, cases, strict=True)}
        ran = {i: future.result() for i, future in futures.items()}
    assert _tree(inputs["root"]) == before, "a bad command wrote next to its inputs"
    return ran


@pytest.mark.parametrize(("args", "message"), CASES, ids=IDS)
def test_bad_input_is_one_line_and_exit_code_2(outcomes, args, message):
    outcome = outcomes[" ".join(args)]
    result = outcome["result"]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gradsync: error: ") and "Traceback" not in result.stderr
    assert message in lines[0]
    assert outcome["left_in_cwd"] == []
    assert outcome["running"] == []


@NO_CUDA
def test_printing_the_config_is_not_held_to_this_machine(gradsync_cmd, cli_env, tmp_path):
    """--cfg runs nothing, so a job meant for a GPU node prints on a login node."""
    result = subprocess.run(
        [*gradsync_cmd, "run", "--cfg", "job", "trainer.device=cuda", "trainer.workers=64"],
        cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "device: cuda" in result.stdout and "workers: 64" in result.stdout
    assert os.listdir(tmp_path) == []


def test_there_are_at_least_30_cases_over_every_command():
    commands = {_case_id(case).split()[0] for case in CASES}
    assert len(CASES) >= 30
    assert {"run", "sweep", "report", "plan", "simulate"} <= commands
