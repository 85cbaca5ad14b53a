"""Whether this host can start a runner's jobs, asked by the config checks before anything runs
(``RunnerConfig.machine_problem``, ``submission_problem``): each answer is one line saying what
is missing, or None.

The runners themselves never ask: a job that reaches its runner has passed these checks.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from gradsync.cluster.env import TORCHRUN_VARS
from gradsync.cluster.run_name import run_name_problem

TEST_ONLY_TIMEOUT_S = 60  # sbatch retries an unreachable controller for a while


def missing_netem_requirement() -> str | None:
    """Why an emulated network (``runner=netem``) cannot be built on this machine, or None."""
    if os.geteuid() != 0:
        return (
            "runner=netem needs root to create network namespaces (run as root, or use "
            "runner=local)"
        )
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"runner=netem needs `{tool}` from iproute2 (apt-get install iproute2)"
    return None


def missing_sbatch() -> str | None:
    if shutil.which("sbatch") is None:
        return "runner=slurm needs Slurm's sbatch on PATH (run from a node of your Slurm cluster)"
    return None


def refused_submission(options: list[str]) -> str | None:
    """What Slurm says against a job with these sbatch ``options``, asked with ``sbatch
    --test-only`` (nothing is submitted); None when it would take the job."""
    command = ["sbatch", "--test-only", *options, "--wrap", "true"]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=TEST_ONLY_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return f"sbatch --test-only had no answer from the controller in {TEST_ONLY_TIMEOUT_S} s"
    if result.returncode == 0:
        return None
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    # A fatal line says why sbatch gave up; else the first error is the specific one (the
    # later ones repeat it as "Batch job submission failed").
    fatal = [line for line in lines if ": fatal: " in line]
    errors = [line for line in lines if ": error: " in line]
    reasons = fatal or errors or lines or [f"sbatch exited with {result.returncode}"]
    return re.sub(r"^sbatch: (error|fatal): ", "", reasons[0])


def missing_torchrun_env() -> str | None:
    absent = [var for var in TORCHRUN_VARS if var not in os.environ]
    if absent:
        return (
            "runner=torchrun runs under torchrun: torchrun --nproc-per-node N -m gradsync run "
            f"runner=torchrun ... ({', '.join(absent)} not set)"
        )
    return run_name_problem()
