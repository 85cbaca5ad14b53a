"""What ``sbatch --test-only`` is asked about before a Slurm sweep is submitted: the options
submitit will write into the job script, spelled as submitit spells them."""

from __future__ import annotations

from omegaconf import OmegaConf

from gradsync.config.compose import compose_jobs
from gradsync.config.schemas.core import SlurmRunnerConfig


def _options(*overrides: str) -> list[str]:
    (cfg,) = compose_jobs(["runner=slurm", *overrides], multirun=False, launcher_here=False)
    runner = OmegaConf.to_object(cfg.runner)
    assert isinstance(runner, SlurmRunnerConfig)
    return runner.sbatch_options(tasks_per_node=2)


def test_free_form_sbatch_options_are_checked_as_submitit_writes_them():
    options = _options(
        "+runner.additional_parameters.exclusive=true",
        "+runner.additional_parameters.mail_type=END",
        "runner.constraint='a100&ib'",
    )
    # submitit: True is a bare flag, underscores become dashes; no shell quotes in an argument.
    assert "--exclusive" in options and "--mail-type=END" in options
    assert "--constraint=a100&ib" in options
    assert not [o for o in options if o.startswith(("--exclusive=", "--mail_type"))]
