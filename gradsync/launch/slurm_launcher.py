"""The Hydra launcher ``runner=slurm`` submits through: hydra-submitit-launcher's Slurm
launcher, with the one submitit option its schema lacks (``srun_args``), and its list and
mapping options untyped so that they can take their values from ``runner.*`` (an
interpolation into a typed list is resolved while the config is still being composed, before
``runner`` exists).

The launcher hands every key of its config to submitit as ``slurm_<key>``, so a key added to
the schema reaches submitit's sbatch script unchanged; nothing here writes sbatch files.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf

NAME = "gradsync_slurm"


@dataclass
class GradsyncSlurmQueueConf(SlurmQueueConf):
    srun_args: Any = None
    """Extra arguments of the srun that starts the tasks (submitit's ``slurm_srun_args``)."""
    setup: Any = None
    additional_parameters: Any = field(default_factory=dict)


def store_launcher() -> None:
    ConfigStore.instance().store(
        group="hydra/launcher", name=NAME, node=GradsyncSlurmQueueConf, provider="gradsync"
    )


def sbatch_flag(name: str, value: Any) -> str:
    """The sbatch argument submitit writes for option ``name`` (``mail_type`` becomes
    ``--mail-type``, a ``True`` value a bare ``--exclusive``), so that ``sbatch --test-only``
    is asked about the same job the script will submit."""
    from submitit.slurm.slurm import _as_sbatch_flag  # its one formatting of #SBATCH lines

    (flag,) = shlex.split(_as_sbatch_flag(name, value).removeprefix("#SBATCH "))
    return flag
