"""A private Slurm cluster for the tests: its own munge daemon, config, ports and state under a
temporary directory, so it never meets a cluster already running on the machine.

One node, ``localhost``, by default. Given ``NamedHosts`` (emulated nodes, see
``runners/testbed.py``): one ``slurmd`` per host, in the host's namespace and under its name,
and the controller on the first host, where Slurm's commands then run (``LocalSlurm.command``).

Needs root and Debian's ``slurm-wlm`` and ``munge`` (``.ci/run`` installs them).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from gradsync.cluster.ports import free_port
from runners.testbed import NamedHosts

DAEMONS = ("slurmctld", "slurmd", "munged")


def missing() -> str | None:
    if os.geteuid() != 0:
        return "starting a Slurm cluster needs root"
    absent = [tool for tool in (*DAEMONS, "sbatch", "sinfo") if shutil.which(tool) is None]
    if absent:
        return (
            f"Slurm is not installed ({', '.join(absent)} missing): apt-get install slurm-wlm munge"
        )
    return None


def _config(root: Path, controller: str, nodes: dict[str, str | None]) -> str:
    """``nodes``: each node's name and address (None: the host's own)."""
    # Declare more CPUs than the machine has, so the array's tasks share its cores.
    node_lines = "".join(
        f"NodeName={name}{'' if address is None else f' NodeAddr={address}'} CPUs=16 "
        "RealMemory=16000 State=UNKNOWN\n"
        for name, address in nodes.items()
    )
    partition = f"PartitionName=debug Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE State=UP"
    # %n: every slurmd on this host (one per node) has files of its own.
    return f"""ClusterName=gradsynctest
SlurmctldHost={controller}
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={root}/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool-%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
KillWait=5
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
{node_lines}{partition} OverSubscribe=YES
"""


class LocalSlurm:
    """``with LocalSlurm(tmp) as env:`` runs Slurm commands with ``env`` (it sets SLURM_CONF);
    with ``hosts``, as ``LocalSlurm.command(argv)``, on the controller's host."""

    def __init__(self, root: Path, hosts: NamedHosts | None = None) -> None:
        self.root = root
        self.conf = root / "slurm.conf"
        self.hosts = hosts
        self.nodes = ["localhost"] if hosts is None else hosts.names

    def command(self, argv: list[str], node: int = 0) -> list[str]:
        """``argv`` as run on ``node`` (the controller's host by default)."""
        return argv if self.hosts is None else self.hosts.command(node, argv)

    def _layout(self) -> tuple[str, dict[str, str | None]]:
        """SlurmctldHost, and each node's name and address."""
        if self.hosts is None:
            return "localhost", {"localhost": None}
        addresses = self.hosts.network.addresses
        return f"{self.nodes[0]}({addresses[0]})", dict(zip(self.nodes, addresses, strict=True))

    def __enter__(self) -> dict[str, str]:
        root = self.root
        (root / "state").mkdir(parents=True)
        for node in self.nodes:
            (root / f"spool-{node}").mkdir()
        key = root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        try:
            # One munged for all nodes: its socket is a file every namespace sees.
            subprocess.run(
                ["munged", "--force", f"--key-file={key}", f"--socket={root}/munge.sock",
                 f"--pid-file={root}/munged.pid", f"--log-file={root}/munged.log",
                 f"--seed-file={root}/munge.seed"],
                check=True, capture_output=True,
            )  # fmt: skip
            self.conf.write_text(_config(root, *self._layout()))
            conf = ["-f", str(self.conf)]
            subprocess.run(self.command(["slurmctld", *conf]), check=True, capture_output=True)
            for node, name in enumerate(self.nodes):
                slurmd = self.command(["slurmd", *conf, "-N", name], node)
                subprocess.run(slurmd, check=True, capture_output=True)
            self._wait_until_idle()
        except BaseException:
            self.close()
            raise
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _wait_until_idle(self, timeout_s: float = 30) -> None:
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = subprocess.run(
                self.command(["sinfo", "-h", "-N", "-o", "%t"]),
                env=env, capture_output=True, text=True, check=False,
            ).stdout.split()  # fmt: skip
            if states == ["idle"] * len(self.nodes):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the test Slurm nodes never became idle; see {self.root}/*.log")

    def _cancel_jobs(self, timeout_s: float = 20) -> None:
        """Without this, a job's steps would outlive the slurmd that started them."""
        env = {**os.environ, "SLURM_CONF": str(self.conf)}

        def slurm(*argv: str) -> str:
            return subprocess.run(
                self.command(list(argv)), env=env, capture_output=True, text=True, check=False
            ).stdout

        slurm("scancel", "--partition=debug")
        deadline = time.monotonic() + timeout_s
        while slurm("squeue", "-h").strip() and time.monotonic() < deadline:
            time.sleep(0.5)

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Cancel the jobs left (a failed test's), stop the daemons this cluster started (by
        PID) and wait until they are gone."""
        if (self.root / "slurmctld.pid").is_file():
            self._cancel_jobs()
        slurmds = sorted(self.root.glob("slurmd-*.pid"))
        for pid_file in [self.root / "slurmctld.pid", *slurmds, self.root / "munged.pid"]:
            if not pid_file.is_file():
                continue
            try:
                pid = int(pid_file.read_text().strip())
                os.kill(pid, signal.SIGTERM)
            except (ValueError, ProcessLookupError):
                continue
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
                time.sleep(0.1)
            if Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)
