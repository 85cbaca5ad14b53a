"""Bad input fails while composing, with one line that says what to do."""

from __future__ import annotations

import re

import pytest

from gradsync.cluster.host_checks import missing_sbatch
from gradsync.jobs.compose import ConfigError, check_sweep, compose_jobs, launcher_overrides
from gradsync.jobs.discovery import group_options

CASES = [
    (
        ["compressor=nope"],
        # Every option the config group has, in order (the new ones included).
        "unknown compressor 'nope'; valid options: "
        + ", ".join(sorted(group_options()["compressor"])),
    ),
    (
        ["compressor=dgc", "trainer.nesterov=true"],
        "compressor=dgc applies plain momentum itself (compressor.momentum), in place of the "
        "optimizer's: set trainer.nesterov=false",
    ),
    (
        ["compressor=dgc", "trainer.momentum=0", "feedback=residual"],
        "compressor=dgc accumulates what it does not send itself; an error-feedback residual would "
        "keep it twice: use feedback=auto (or none)",
    ),
    (
        ["compressor=topk", "compressor.warmup_epochs=-1"],
        "compressor.warmup_epochs must be >= 0 (0: no warm-up), got -1",
    ),
    (
        ["compressor=topk", "compressor.warmup_epochs=2", "compressor.warmup_density=0.001"],
        "compressor.warmup_density (0.001) must be >= compressor.density (0.01)",
    ),
    (
        ["compressor=threshold", "compressor.threshold=0.1", "compressor.warmup_epochs=1"],
        "compressor.warmup_epochs needs compressor.threshold unset",
    ),
    (
        ["compressor=dgc", "trainer.momentum=0", "compressor.clip_norm=0"],
        "compressor.clip_norm must be > 0 or null (off), got 0",
    ),
    (["model=resnet9000"], "unknown model 'resnet9000'; valid options: "),
    (["trainer.wrkers=2"], "unknown key 'trainer.wrkers'; valid keys in trainer: workers"),
    (
        ["model=mlp", "model.factors=8", "model.hiden=[1]"],
        "unknown key 'model.factors'; valid keys in model: hidden",
    ),
    (["+trainer.extra=1"], "unknown key 'trainer.extra'"),
    (["bogus=1"], "unknown key 'bogus'"),
    (
        ["runner=slurm", "runner.additional_parameters.mail-type=END"],
        "runner.additional_parameters has no settings to override; add one with "
        "+runner.additional_parameters.mail-type=VALUE",
    ),
    (["trainer.workers=0"], "trainer.workers must be >= 1, got 0"),
    (
        ["trainer.workers=1,2"],
        "trainer.workers=1,2 lists several values: add -m to sweep over them",
    ),
    (["trainer.lr=[1"], "no viable alternative at input '[1'"),
    (  # digits: 1,797 images, 20% held out; known without loading them
        ["trainer.batch_size=100000"],
        "the training set has 1438 samples, fewer than one global batch of 200000 "
        "(trainer.batch_size × trainer.workers): lower either",
    ),
    (
        ["dataset=synthetic", "dataset.num_samples=10", "trainer.batch_size=8"],
        "the training set has 10 samples, fewer than one global batch of 16",
    ),
    (["scheduler=deft", "scheduler.staleness_correction=late"], "staleness_correction 'late'"),
    (["trainer.workers=-3"], "trainer.workers must be >= 1"),
    (["trainer.workers=two"], "trainer.workers=two: Value 'two'"),
    (["compressor=randomk", "compressor.density=0"], "compressor.density must be in (0, 1]"),
    (["compressor=randomk", "compressor.density=1.01"], "compressor.density must be in (0, 1]"),
    (["compressor=randomk", "compressor.density=-0.5"], "compressor.density must be in (0, 1]"),
    (["compressor=deft", "compressor.density=0"], "compressor.density must be in (0, 1]"),
    (["compressor=topk", "compressor.density=2"], "compressor.density must be in (0, 1]"),
    (
        ["compressor=topk", "compressor.exchange=allreduce"],
        "compressor.exchange=allreduce is not valid for topk: every worker selects different "
        "indices, so values cannot be summed elementwise; valid: union, allgather",
    ),
    (["compressor=threshold", "compressor.exchange=ring"], "valid: union, allgather"),
    (["compressor=topk", "compressor.scope=row"], "unknown compressor.scope 'row'; valid: global"),
    (["compressor=threshold", "compressor.threshold=-1"], "compressor.threshold must be >= 0"),
    (["compressor=cltk", "compressor.exchange=union"], "unknown key 'compressor.exchange'"),
    (["compressor=terngrad", "compressor.clip=-1"], "compressor.clip must be >= 0 (0 disables"),
    (
        ["compressor=terngrad", "compressor.float_every_epochs=-2"],
        "compressor.float_every_epochs must be >= 0",
    ),
    (["compressor=terngrad", "compressor.density=0.1"], "unknown key 'compressor.density'"),
    (["compressor=qsgd", "compressor.levels=0"], "compressor.levels must be in [1, 127], got 0"),
    (["compressor=qsgd", "compressor.levels=300"], "compressor.levels must be in [1, 127]"),
    (["feedback=ef"], "unknown feedback 'ef'; valid options: auto, none, residual"),
    (
        ["compressor=powersgd", "feedback=residual"],
        "compressor=powersgd accumulates what it does not send itself; an error-feedback "
        "residual would keep it twice: use feedback=auto (or none)",
    ),
    (
        ["compressor=powersgd", "scheduler=ps_bsp", "trainer.servers=1"],
        "compressor=powersgd needs what the workers exchanged back on each worker",
    ),
    (["compressor=powersgd", "compressor.rank=0"], "compressor.rank must be >= 1, got 0"),
    (
        ["compressor=powersgd", "scheduler=deft"],
        "compressor=powersgd keeps a memory per group, updated once a step, but scheduler=deft "
        "may compress a bucket twice in one step",
    ),
    (
        ["compressor=dgc", "trainer.momentum=0", "scheduler=deft"],
        "compressor=dgc keeps a memory per group, updated once a step, but scheduler=deft",
    ),
    (
        ["scheduler=omgs", "scheduler.rule=best"],
        "unknown scheduler.rule 'best'; valid: paper, code",
    ),
    (["scheduler=omgs", "scheduler.profile_steps=0"], "scheduler.profile_steps must be >= 1"),
    (["scheduler=mgs", "scheduler.threshold=0"], "scheduler.threshold must be >= 1, got 0"),
    (["scheduler=wfbp", "scheduler.bucket_mb=-1"], "scheduler.bucket_mb must be > 0"),
    (
        ["scheduler=wfbp", "compressor=terngrad"],
        "scheduler=wfbp all-reduces, but compressor=terngrad all-gathers its payloads; use",
    ),
    (["scheduler=wfbp", "compressor=topk", "compressor.exchange=allgather"], "compressor=topk all"),
    (["scheduler=lagz"], "unknown scheduler 'lagz'; valid options: allreduce, "),
    (["scheduler=deft", "scheduler.links=3"], "scheduler.links must be 1 or 2, got 3"),
    (["scheduler=ssp", "scheduler.staleness=-1"], "scheduler.staleness must be >= 0, got -1"),
    (["scheduler=osp", "compressor=terngrad"], "compressor=terngrad is not supported with it"),
    (["scheduler=osp", "trainer.servers=2"], "scheduler=osp runs one parameter server"),
    (
        ["scheduler=osp", "scheduler.umax_formula=best"],
        "unknown scheduler.umax_formula 'best'; valid: paper, corrected",
    ),
    (["scheduler=osp", "scheduler.max_unimportant=2"], "scheduler.max_unimportant must be in"),
    (["scheduler=asp", "trainer.servers=0"], "trainer.servers must be >= 1, got 0"),
    (
        ["scheduler=deft", "scheduler.merge_reduction=max"],
        "unknown scheduler.merge_reduction 'max'; valid: mean, sum",
    ),
    (["scheduler=deft", "scheduler.mu=0.5"], "scheduler.mu must be >= 1"),
    (["scheduler=deft", "scheduler.times=nope.json"], "scheduler.times: no file 'nope.json'"),
    (["scheduler=deft", "compressor=terngrad"], "scheduler=deft all-reduces, but compressor="),
    (
        ["runner=netem", "runner.bandwidth=fast"],
        "runner.bandwidth 'fast' is not a rate like 100mbit or 1gbit",
    ),
    (["runner=netem", "runner.queue_ms=0"], "runner.queue_ms must be > 0, got 0"),
    (
        ["runner=slurm", "trainer.workers=3", "runner.nodes=2"],
        "trainer.workers=3 does not split evenly over runner.nodes=2",
    ),
    (["runner=slurm", "runner.time_min=0"], "runner.time_min must be >= 1, got 0"),
    (
        ["experiment=deft_ncf_movielens", "compressor=none"],
        "experiment/deft_ncf_movielens sets compressor.density, which the chosen compressor "
        "option does not have",
    ),
    (["trainer.optimizer=lion"], "expected one of [sgd, adam]"),
    (["trainer.adam_betas=[0.9]"], "trainer.adam_betas must be two numbers in [0, 1)"),
    (["trainer.lr=0.1,0.2"], "add -m to sweep"),
    (["trainer.resume=does/not/exist"], "trainer.resume=does/not/exist does not exist"),
    (["scheduler=bytescheduler", "scheduler.credit=0"], "scheduler.credit must be >= 1, got 0"),
    (
        ["scheduler=bytescheduler", "scheduler.partition_size=0"],
        "scheduler.partition_size must be >= 1, got 0",
    ),
    (
        ["scheduler=bytescheduler", "compressor=terngrad"],
        "scheduler=bytescheduler all-reduces, but compressor=terngrad all-gathers its payloads; "
        "use compressor=none",
    ),
    (
        ["scheduler=usbyte", "compressor=topk", "compressor.exchange=allgather"],
        "scheduler=usbyte all-reduces, but compressor=topk all-gathers its payloads",
    ),
    (["scheduler=usbyte", "scheduler.credit=-5"], "scheduler.credit must be >= 1, got -5"),
    (
        ["scheduler=usbyte", "scheduler.min_partition_size=10", "scheduler.max_partition_size=5"],
        "scheduler.min_partition_size must be >= 1 and <= scheduler.max_partition_size, got 10 "
        "and 5",
    ),
    (["scheduler=usbyte", "scheduler.profile_steps=0"], "scheduler.profile_steps must be >= 1"),
    (["scheduler=usbyte", "scheduler.alpha=0.001"], "give both scheduler.alpha and scheduler.beta"),
    (
        ["scheduler=usbyte", "scheduler.alpha=-1", "scheduler.beta=1e-9"],
        "scheduler.alpha and scheduler.beta must be >= 0",
    ),
    (["scheduler=bytescheduler", "scheduler.bucket_mb=1"], "unknown key 'scheduler.bucket_mb'"),
    # a model that cannot take its dataset's inputs, tried on the meta device
    (
        ["model=cnn", "dataset=synthetic", "dataset.image_shape=[3,1,1]"],
        "model=cnn cannot take dataset=synthetic's inputs of shape [3, 1, 1] at "
        "trainer.batch_size=32: Given input size: (32x1x1). Calculated output size: (32x0x0). "
        "Output size is too small; change dataset.image_shape, or choose another model",
    ),
    (
        ["model=vgg16", "dataset=synthetic", "dataset.image_shape=[3,16,16]"],
        "model=vgg16 cannot take dataset=synthetic's inputs of shape [3, 16, 16] at "
        "trainer.batch_size=32: Given input size: (512x1x1). Calculated output size: (512x0x0).",
    ),
    (
        [
            "model=resnet18",
            "dataset=synthetic",
            "dataset.image_shape=[3,2,2]",
            "trainer.batch_size=1",
        ],
        "model=resnet18 cannot take dataset=synthetic's inputs of shape [3, 2, 2] at "
        "trainer.batch_size=1: Expected more than 1 value per channel when training",
    ),
    (
        [
            "model=gpt2",
            "model.n_layer=1",
            "dataset=synthetic",
            "dataset.kind=tokens",
            "dataset.seq_len=64",
            "model.block_size=32",
        ],
        "model=gpt2 cannot take dataset=synthetic's inputs of shape [64] at trainer.batch_size=32: "
        "input of 64 tokens is longer than model.block_size=32; raise model.block_size or lower "
        "dataset.seq_len",
    ),
    # numbers that are not numbers, or past any sense: refused where they enter
    (["trainer.lr=nan"], "trainer.lr must be a finite number in (0, 1000], got nan"),
    (["trainer.lr=inf"], "trainer.lr must be a finite number in (0, 1000], got inf"),
    (["trainer.lr_gamma=nan"], "trainer.lr_gamma must be a finite number in (0, 1], got nan"),
    (["trainer.workers=100000000000"], "trainer.workers must be in [1, 65536], got 100000000000"),
    ([f"trainer.seed={10**30}"], f"trainer.seed must be in [0, 4294967295], got {10**30}"),
    (
        ["compressor=powersgd", "compressor.seed=4294967296"],
        "compressor.seed must be in [0, 4294967295] (trainer.seed by default), got 4294967296",
    ),
    ([f"trainer.comm_timeout_s={10**30}"], "trainer.comm_timeout_s must be in [1, 604800], got"),
    (["trainer.lr_step_epochs=0"], "trainer.lr_step_epochs must be >= 1, got 0"),
    (
        ["dataset=synthetic", "dataset.image_shape=[3,100000,32]"],
        "dataset.image_shape entries must be in [1, 8192], got [3, 100000, 32]",
    ),
    (
        ["scheduler=usbyte", "scheduler.alpha=1e308", "scheduler.beta=1e-9"],
        "scheduler.alpha must be <= 60 or null, got 1e+308",
    ),
    (["scheduler=osp", "scheduler.bandwidth=fast"], "scheduler.bandwidth 'fast' is not a rate"),
    ([f"trainer.lr={10**400}"], "not a value this key takes (int too large to convert to float)"),
    (
        ["logger=console", "logger.wandb={a: 1}"],
        "logger.wandb={a: 1}: not a value this key takes",
    ),
    (
        ["model=mlp", "model.hidden=[[1]]"],
        "model.hidden must be a list of single values, got [[1]]",
    ),
    (
        ["trainer.loader_workers=99999"],
        "trainer.loader_workers must be auto or an integer in [0, 1024], got 99999",
    ),
    (["trainer.loader_workers='²'"], "trainer.loader_workers must be auto or an integer >= 0"),
]


@pytest.mark.parametrize(("overrides", "message"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_input_is_one_clear_line(overrides, message):
    with pytest.raises(ConfigError) as info:
        compose_jobs(overrides, multirun=False)
    text = str(info.value)
    assert message in text
    assert "\n" not in text


def test_cuda_on_a_machine_without_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ConfigError, match=r"no usable CUDA device; use trainer\.device=cpu"):
        compose_jobs(["trainer.device=cuda"], multirun=False)


def test_every_job_of_a_sweep_is_checked_before_any_runs():
    with pytest.raises(ConfigError, match=r"trainer\.workers must be >= 1"):
        compose_jobs(["trainer.workers=2,0"], multirun=True)
    assert len(compose_jobs(["trainer.workers=1,2", "trainer.lr=0.1,0.2"], multirun=True)) == 4


def test_resume_path_without_checkpoint(tmp_path):
    with pytest.raises(ConfigError, match="holds no checkpoint"):
        compose_jobs([f"trainer.resume={tmp_path}"], multirun=False)


def test_keys_of_a_swept_group_are_applied_per_job():
    from gradsync.jobs.compose import defer_keys_of_swept_groups

    assert defer_keys_of_swept_groups(
        ["compressor=topk,deft", "compressor.density=0.1", "trainer.lr=0.1", "model.hidden=[]"]
    ) == [
        "compressor=topk,deft",
        "compressor.density=choice(0.1)",
        "trainer.lr=0.1",
        "model.hidden=[]",
    ]
    # already a sweep, or the group is not swept: unchanged
    unchanged = ["compressor=topk", "compressor.density=0.1,0.01", "model.hidden=[1]"]
    assert defer_keys_of_swept_groups(unchanged) == unchanged


def test_a_sweep_names_the_jobs_whose_values_are_invalid():
    problems = [problem for _, problem in check_sweep(["trainer.workers=2,0", "trainer.lr=0.1"])]
    assert problems[0] is None
    assert "trainer.workers must be >= 1, got 0" in str(problems[1])


def test_a_sweep_with_no_valid_job_fails_as_a_whole():
    with pytest.raises(ConfigError, match=r"trainer\.workers must be >= 1"):
        check_sweep(["trainer.workers=0,-1"])


def test_a_sweep_with_a_typo_fails_before_anything_runs():
    with pytest.raises(ConfigError, match="unknown compressor 'topkk'"):
        check_sweep(["compressor=topk,topkk"])


@pytest.mark.skipif(missing_sbatch() is not None, reason="runner=slurm checks for sbatch")
def test_a_slurm_sweep_is_one_array_shaped_by_its_largest_job():
    jobs = [cfg for cfg, _ in check_sweep(["runner=slurm", "trainer.workers=1,4"])]
    assert launcher_overrides(jobs) == [
        "hydra.launcher.tasks_per_node=4",
        "hydra.launcher.cpus_per_task=1",
    ]
    jobs = [
        cfg for cfg, _ in check_sweep(["runner=slurm", "trainer.workers=4", "runner.nodes=1,2"])
    ]
    with pytest.raises(ConfigError, match=r"runner\.nodes cannot differ between jobs"):
        launcher_overrides(jobs)


@pytest.mark.skipif(missing_sbatch() is not None, reason="runner=slurm checks for sbatch")
@pytest.mark.parametrize(
    "swept", ["runner.partition=a,b", "runner.time_min=10,20", "runner.gres=gpu:1,gpu:2"]
)
def test_a_slurm_sweep_refuses_resources_its_one_array_cannot_vary(swept):
    # Hydra's launcher takes these once for the whole array: a second value would be ignored.
    jobs = [cfg for cfg, _ in check_sweep(["runner=slurm", swept])]
    key = re.escape(swept.split("=")[0])
    with pytest.raises(ConfigError, match=rf"{key} cannot differ between"):
        launcher_overrides(jobs)


@pytest.mark.parametrize(
    ("overrides", "start"),
    [
        (
            ["trainer.workers=1,2"],
            "trainer.workers=1,2 lists several values: add -m to sweep over them, or quote it",
        ),
        (
            [f"trainer.lr={10**400}"],
            f"trainer.lr={10**400}: not a value this key takes (int too large to convert to float)",
        ),
        (["logger=console", "logger.wandb={a: 1}"], "logger.wandb={a: 1}: not a value this key"),
    ],
)
def test_a_value_refused_while_composing_is_said_once_from_its_override(overrides, start):
    """What composing refuses, in Hydra's words or in an exception of OmegaConf's own type
    (an OverflowError, an AttributeError), is one line that starts with the override."""
    with pytest.raises(ConfigError) as info:
        compose_jobs(overrides, multirun=False)
    assert str(info.value).startswith(start)
    assert "\n" not in str(info.value)
