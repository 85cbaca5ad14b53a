"""Jobs on two nodes, emulated on this host: two network namespaces on a bridge, each with a
hostname of its own that both resolve to its address (``NamedHosts``), as on a cluster.

torchrun's c10d rendezvous across both nodes and a two-node Slurm each run one process group
over the two; it trains exactly as the same job does on one node. Every process of a torchrun
job writes to one run directory, and no two jobs share one.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from gradsync.cluster.host_checks import missing_netem_requirement
from gradsync.cluster.ports import free_port
from runners.testbed import NamedHosts, ShapedNetwork
from tests.helpers import slurm
from tests.helpers.cli import final_params, run_cli, run_completed, summary


def _missing() -> str | None:
    absent = [tool for tool in ("nsenter", "unshare") if shutil.which(tool) is None]
    if absent:
        return f"emulated nodes need {' and '.join(absent)} (apt-get install util-linux)"
    return missing_netem_requirement()


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))

NODES = ["node0", "node1"]
JOB = ["trainer.workers=2", "trainer.max_steps=4"]
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
RUN_DIR = re.compile(r"^run dir: (.+)$", re.MULTILINE)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory) -> Iterator[NamedHosts]:
    with ShapedNetwork(workers=len(NODES), rate="10gbit") as network:
        yield NamedHosts(network, NODES, tmp_path_factory.mktemp("hosts") / "hosts")


@pytest.fixture(scope="module")
def reference(gradsync_cmd, module_cli_env, tmp_path_factory) -> dict[str, torch.Tensor]:
    """The job's final parameters on one node (runner=local)."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    return final_params(run_completed(gradsync_cmd, module_cli_env, run_dir, *JOB))


def _together(job: str, commands: list[list[str]], cwd: Path, env: dict[str, str]) -> list[str]:
    """Run ``commands`` at once (one job's launchers, one per node) and return what each
    printed. They must all succeed; none is left running."""
    logs = [cwd / f"{job}-{n}.log" for n in range(len(commands))]
    env = {**env, "OMP_NUM_THREADS": "1"}
    procs = []
    try:
        for argv, log in zip(commands, logs, strict=True):
            with log.open("w") as out:  # a file: a pipe nobody reads while we wait could fill
                procs.append(subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=out))
        codes = [proc.wait(timeout=180) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()  # torchrun stops its workers on SIGTERM
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    outputs = [log.read_text() for log in logs]
    for code, output in zip(codes, outputs, strict=True):
        assert code == 0, output[-3000:]
    return outputs


@pytest.fixture(scope="module")
def torchrun_jobs(hosts, module_cli_env, tmp_path_factory) -> tuple[Path, list[list[str]]]:
    """Two jobs with torchrun's default run id (``none``), from one directory: one on both
    nodes (c10d rendezvous at node0's name), then one on one node (static rendezvous).
    The directory, and the launchers' outputs of each job."""
    cwd = tmp_path_factory.mktemp("torchrun")
    job = ["-m", "gradsync", "run", "runner=torchrun", *JOB]
    endpoint = f"{NODES[0]}:{free_port()}"
    two_nodes = [
        hosts.command(node, [TORCHRUN, "--nnodes", "2", "--nproc-per-node", "1",
                             "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, *job])
        for node in range(len(NODES))
    ]  # fmt: skip
    one_node = [[TORCHRUN, "--nproc-per-node", "2", "--master-port", str(free_port()), *job]]
    return cwd, [
        _together("two-nodes", two_nodes, cwd, module_cli_env),
        _together("one-node", one_node, cwd, module_cli_env),
    ]


def _run_dirs(outputs: list[str]) -> set[Path]:
    """The run directories the processes of one job named (each names its own)."""
    return {Path(found) for output in outputs for found in RUN_DIR.findall(output)}


def test_a_job_on_two_nodes_trains_exactly_as_on_one(torchrun_jobs, reference):
    _, (two_nodes, _) = torchrun_jobs
    (run_dir,) = _run_dirs(two_nodes)
    final = summary(run_dir)
    assert final["status"] == "completed"
    assert final["final"]["comm/bytes_wire"] > 0  # the ranks, one per node, exchanged
    params = final_params(run_dir)
    assert params.keys() == reference.keys()
    # A sum of two is the same in either order: gloo across the bridge gives the same bits.
    for key, value in params.items():
        assert torch.equal(value, reference[key]), key


def test_every_process_of_a_torchrun_job_shares_one_run_directory_no_other_job_has(
    torchrun_jobs,
):
    cwd, jobs = torchrun_jobs
    named = [_run_dirs(outputs) for outputs in jobs]
    assert [len(dirs) for dirs in named] == [1, 1], named  # one per job
    assert [_run_dirs([output]) for output in jobs[0]] == [named[0]] * len(NODES)  # each node's
    assert named[0] != named[1]
    made = {path for path in cwd.glob("outputs/torchrun/*/*") if path.is_dir()}
    assert made == named[0] | named[1]  # and no stray directory of any process


# ---- Slurm: two slurmd, one per node; the controller and the sweep on node0 ---------------------
@pytest.fixture(scope="module")
def slurm_sweep(hosts, gradsync_cmd, module_cli_env, tmp_path_factory) -> Path:
    if slurm.missing() is not None:
        pytest.skip(str(slurm.missing()))
    root = tmp_path_factory.mktemp("slurm2")
    sweep_dir = root / "sweep"
    cluster = slurm.LocalSlurm(root / "cluster", hosts)
    with cluster as cluster_env:
        run = [*gradsync_cmd, "run", "-m", "runner=slurm", "runner.nodes=2", *JOB,
               "compressor=none,topk", f"hydra.sweep.dir={sweep_dir}"]  # fmt: skip
        env = {**module_cli_env, "SLURM_CONF": cluster_env["SLURM_CONF"]}
        result = run_cli(cluster.command(run), env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return sweep_dir


def _task_log(sweep_dir: Path, job: int, task: int) -> str:
    """What submitit logged for ``task`` of array element ``job``."""
    (log,) = sweep_dir.glob(f".submitit/*_{job}/*_{job}_{task}_log.out")
    return log.read_text()


@pytest.mark.parametrize("job", [0, 1])
def test_each_job_of_a_two_node_slurm_sweep_runs_across_both_nodes(slurm_sweep, job):
    for task, node in enumerate(NODES):
        started = f"hostname={node}, local_rank=0(1), node={task}(2), global_rank={task}(2)"
        assert started in _task_log(slurm_sweep, job, task)
    final = summary(slurm_sweep / str(job))
    assert final["status"] == "completed"
    assert final["final"]["comm/bytes_wire"] > 0
    rows = list(csv.DictReader((slurm_sweep / "summary.csv").open()))
    assert rows[job]["status"] == "completed"


def test_a_two_node_slurm_job_trains_exactly_as_on_one_node(slurm_sweep, reference):
    params = final_params(slurm_sweep / "0")  # compressor=none: plain all-reduce
    for key, value in params.items():
        assert torch.equal(value, reference[key]), key
