"""What a Slurm sweep's one job array asks for: the launcher's shape, set from all its jobs,
and what ``sbatch --test-only`` is asked about before anything is submitted (the options
submitit will write into the job script, spelled as submitit spells them)."""

from __future__ import annotations

from omegaconf import OmegaConf

from gradsync.jobs.compose import compose_each, compose_jobs, launcher_overrides
from gradsync.launch.options import ArrayShape, SlurmRunnerConfig


def _runner(*overrides: str) -> SlurmRunnerConfig:
    (cfg,) = compose_jobs(["runner=slurm", *overrides], multirun=False, launcher_here=False)
    runner = OmegaConf.to_object(cfg.runner)
    assert isinstance(runner, SlurmRunnerConfig)
    return runner


def test_free_form_sbatch_options_are_checked_as_submitit_writes_them():
    options = _runner(
        "+runner.additional_parameters.exclusive=true",
        "+runner.additional_parameters.mail_type=END",
        "runner.constraint='a100&ib'",
    ).sbatch_options(ArrayShape(tasks_per_node=2, gpus_per_node=None, cpus_per_task=1))
    # submitit: True is a bare flag, underscores become dashes; no shell quotes in an argument.
    assert "--exclusive" in options and "--mail-type=END" in options
    assert "--constraint=a100&ib" in options
    assert not [o for o in options if o.startswith(("--exclusive=", "--mail_type"))]


def test_a_gpu_sweep_over_workers_asks_each_node_for_the_largest_jobs_gpus():
    # Hydra resolves the launcher from the command without its swept values, so what the jobs
    # derive from trainer.workers must reach it as overrides.
    sweep = ["runner=slurm", "runner.nodes=2", "trainer.device=cuda", "trainer.workers=8,16"]
    sweep += ["trainer.threads_per_worker=1,3"]
    jobs = [cfg for cfg, _ in compose_each(sweep, launcher_here=False)]
    assert sorted(cfg.runner.gpus_per_node for cfg in jobs) == [4, 4, 8, 8]
    assert sorted(launcher_overrides(jobs)) == [
        "hydra.launcher.cpus_per_task=3",
        "hydra.launcher.gpus_per_node=8",
        "hydra.launcher.tasks_per_node=8",
    ]
    cpu = [
        cfg for cfg, _ in compose_each(["runner=slurm", "trainer.workers=2,4"], launcher_here=False)
    ]
    assert "hydra.launcher.gpus_per_node" not in " ".join(launcher_overrides(cpu))
