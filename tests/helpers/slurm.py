"""A private one-node Slurm cluster for the tests: its own munge daemon, config, ports and state
under a temporary directory, so it never meets a cluster already running on the machine.

Needs root and Debian's ``slurm-wlm`` and ``munge`` (``.ci/run`` installs them).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from gradsync.dist.ports import free_port

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


def _config(root: Path) -> str:
    return f"""ClusterName=gradsynctest
SlurmctldHost=localhost
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={root}/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
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
# Declare more CPUs than the machine has, so the array's tasks share its cores.
SlurmdParameters=config_overrides
NodeName=localhost CPUs=16 RealMemory=16000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


class LocalSlurm:
    """``with LocalSlurm(tmp) as env:`` runs Slurm commands with ``env`` (it sets SLURM_CONF)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf = root / "slurm.conf"

    def __enter__(self) -> dict[str, str]:
        root = self.root
        (root / "state").mkdir(parents=True)
        (root / "spool").mkdir()
        key = root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        try:
            subprocess.run(
                ["munged", "--force", f"--key-file={key}", f"--socket={root}/munge.sock",
                 f"--pid-file={root}/munged.pid", f"--log-file={root}/munged.log",
                 f"--seed-file={root}/munge.seed"],
                check=True, capture_output=True,
            )  # fmt: skip
            self.conf.write_text(_config(root))
            for daemon in ("slurmctld", "slurmd"):
                subprocess.run([daemon, "-f", str(self.conf)], check=True, capture_output=True)
            self._wait_until_idle()
        except BaseException:
            self.close()
            raise
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _wait_until_idle(self, timeout_s: float = 30) -> None:
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = subprocess.run(
                ["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True, check=False
            ).stdout.strip()
            if state == "idle":
                return
            time.sleep(0.5)
        raise RuntimeError(f"the test Slurm node never became idle; see {self.root}/*.log")

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the daemons this cluster started (by PID) and wait until they are gone."""
        for daemon in DAEMONS:
            pid_file = self.root / f"{daemon}.pid"
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
