from __future__ import annotations

import pytest

from gradsync.cluster.env import DistEnv, first_slurm_host, slurm_port


def test_torchrun_environment():
    env = DistEnv.from_environ(
        {
            "RANK": "3",
            "WORLD_SIZE": "8",
            "LOCAL_RANK": "1",
            "MASTER_ADDR": "n1",
            "MASTER_PORT": "29500",
        }
    )
    assert (env.rank, env.world_size, env.local_rank, env.init_method, env.launcher) == (
        3,
        8,
        1,
        "env://",
        "torchrun",
    )
    assert not env.is_main


def test_local_runner_environment():
    env = DistEnv.from_environ(
        {
            "RANK": "0",
            "WORLD_SIZE": "2",
            "GRADSYNC_LAUNCHER": "local",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "4000",
        }
    )
    assert env.init_method == "env://" and env.launcher == "local" and env.is_main


def test_slurm_environment():
    env = DistEnv.from_environ(
        {
            "SLURM_PROCID": "5",
            "SLURM_NTASKS": "8",
            "SLURM_LOCALID": "1",
            "SLURM_JOB_NODELIST": "gpu[03-05,09]",
            "SLURM_JOB_ID": "4242",
        }
    )
    assert (env.rank, env.world_size, env.local_rank) == (5, 8, 1)
    assert env.init_method == f"tcp://gpu03:{slurm_port('4242')}"


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [
        ("node7", "node7"),
        ("gpu[03-05,09],cpu1", "gpu03"),
        ("a[1,2]", "a1"),
        ("", "127.0.0.1"),
        ("x-1,x-2", "x-1"),
    ],
)
def test_first_slurm_host(nodelist, host):
    assert first_slurm_host(nodelist) == host


def test_missing_environment_says_how_to_launch():
    with pytest.raises(RuntimeError, match="gradsync run"):
        DistEnv.from_environ({})
