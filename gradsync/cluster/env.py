"""Rank and world size from whichever launcher started this process.

The same worker entry point runs under gradsync's local runner, ``torchrun`` and a Slurm task;
each leaves its own environment variables, which ``DistEnv.from_environ`` reads.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
"""What torchrun sets for every process it starts."""


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    """Ranks on this node (this rank's node holds ranks ``rank - local_rank`` and up)."""
    init_method: str
    """A torch.distributed init method: ``env://`` (MASTER_ADDR/PORT) or ``tcp://host:port``."""
    launcher: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> DistEnv:
        env = os.environ if environ is None else environ
        if "RANK" in env and "WORLD_SIZE" in env:  # gradsync local runner, torchrun
            return cls(
                rank=int(env["RANK"]),
                world_size=int(env["WORLD_SIZE"]),
                local_rank=int(env.get("LOCAL_RANK", env["RANK"])),
                local_world_size=int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])),
                init_method="env://",
                launcher=env.get("GRADSYNC_LAUNCHER", "torchrun"),
            )
        if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
            host = env.get("MASTER_ADDR") or first_slurm_host(env.get("SLURM_JOB_NODELIST", ""))
            port = env.get("MASTER_PORT") or str(slurm_port(env.get("SLURM_JOB_ID", "0")))
            return cls(
                rank=int(env["SLURM_PROCID"]),
                world_size=int(env["SLURM_NTASKS"]),
                local_rank=int(env.get("SLURM_LOCALID", "0")),
                local_world_size=slurm_tasks_per_node(env),
                init_method=f"tcp://{host}:{port}",
                launcher="slurm",
            )
        raise RuntimeError(
            "no rank found in the environment: start workers with `gradsync run`, `torchrun` "
            "or `srun` (RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS must be set)"
        )


def slurm_tasks_per_node(env: Mapping[str, str]) -> int:
    """Tasks of this job step on each node: ``SLURM_NTASKS_PER_NODE`` (submitit always asks
    with ``--ntasks-per-node``), else the tasks spread evenly over the nodes."""
    per_node = env.get("SLURM_NTASKS_PER_NODE", "")
    if per_node.isdigit():
        return int(per_node)
    return int(env.get("SLURM_NTASKS", "1")) // max(1, int(env.get("SLURM_NNODES", "1")))


def slurm_port(job_id: str) -> int:
    """A port every task of one Slurm job agrees on without talking: derived from the job id."""
    digits = re.sub(r"\D", "", job_id) or "0"
    return 20000 + int(digits[-4:]) % 20000


def first_slurm_host(nodelist: str) -> str:
    """First host of a Slurm node list such as ``gpu[03-05,09],cpu1`` (-> ``gpu03``)."""
    nodelist = nodelist.strip()
    if not nodelist:
        return "127.0.0.1"
    match = re.match(r"([^,\[]+)(\[([^\]]+)\])?", nodelist)
    if match is None:
        raise ValueError(f"cannot parse SLURM_JOB_NODELIST {nodelist!r}")
    prefix, _, ranges = match.groups()
    if ranges is None:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first
