"""A -m command split into jobs as Hydra's basic sweeper runs them: the same jobs, numbered in
the same order (``gradsync sweep --list`` line i is what ``gradsync run -m`` job i runs)."""

from __future__ import annotations

import itertools

import pytest

from gradsync.jobs.compose import ConfigError, expand_sweep

# What Hydra 1.3's basic sweeper makes of each command, written out.
CASES = [
    ([], [[]]),
    (["a=1,2", "b=x"], [["a=1", "b=x"], ["a=2", "b=x"]]),
    (
        ["trainer.workers=range(1,4)"],
        [["trainer.workers=1"], ["trainer.workers=2"], ["trainer.workers=3"]],
    ),
    (["x=range(0,1,0.25)"], [["x=0.0"], ["x=0.25"], ["x=0.5"], ["x=0.75"]]),
    (
        ["compressor=choice(topk,deft)", "compressor.density=0.1"],
        [
            ["compressor=topk", "compressor.density=0.1"],
            ["compressor=deft", "compressor.density=0.1"],
        ],
    ),
    # glob(): the group's options that match, in Hydra's (sorted) order
    (
        ["compressor=glob(*,exclude=[none,fp16,bf16,qsgd,signsgd,terngrad,randomk,dgc,powersgd])"],
        [
            ["compressor=cltk"],
            ["compressor=deft"],
            ["compressor=threshold"],
            ["compressor=topk"],
        ],
    ),
    # a comma inside quotes is part of one value
    (["name='a,b'", "lr=0.1,0.2"], [["name='a,b'", "lr=0.1"], ["name='a,b'", "lr=0.2"]]),
    (["name=choice('a,b',c)"], [["name=a\\,b"], ["name=c"]]),
    # a key given again keeps its first place and takes its last values
    (["a=1,2", "b=3", "a=5,6"], [["a=5", "b=3"], ["a=6", "b=3"]]),
    (["k=1", "k=2,3"], [["k=2"], ["k=3"]]),
    (
        ["+extra=1,2", "~trainer.resume", "model@foo=cnn"],
        [
            ["+extra=1", "~trainer.resume=null", "model@foo=cnn"],
            ["+extra=2", "~trainer.resume=null", "model@foo=cnn"],
        ],
    ),
    (
        ["s=sort(3,1,2)", "t=[1,2]", "u={a:1,b:2}", 'v="x y"', "w=null", "z=true"],
        [[f"s={s}", "t=[1,2]", "u={a:1,b:2}", 'v="x y"', "w=null", "z=True"] for s in (1, 2, 3)],
    ),
]


@pytest.mark.parametrize(("overrides", "jobs"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_jobs_are_those_of_hydras_basic_sweeper(overrides, jobs):
    assert expand_sweep(overrides) == jobs


def test_the_last_key_varies_fastest():
    values = {"a": ["1", "2"], "b": ["x", "y", "z"], "c": ["5", "6", "7", "8"]}
    overrides = ["trainer.seed=3", *(f"{k}={','.join(v)}" for k, v in values.items())]
    jobs = expand_sweep(overrides)
    assert len(jobs) == 2 * 3 * 4
    for number, job in enumerate(jobs):
        c, rest = number % 4, number // 4
        b, a = rest % 3, rest // 3
        assert job == ["trainer.seed=3", f"a={'12'[a]}", f"b={'xyz'[b]}", f"c={'5678'[c]}"]
    assert jobs == [
        ["trainer.seed=3", *(f"{k}={v}" for k, v in zip(values, combo, strict=True))]
        for combo in itertools.product(*values.values())
    ]


def test_an_interval_cannot_be_split_into_jobs():
    with pytest.raises(ConfigError, match=r"^trainer\.lr=interval\(0\.1,0\.2\): an interval"):
        expand_sweep(["trainer.lr=interval(0.1,0.2)"])


def test_an_override_that_does_not_parse_is_one_line():
    with pytest.raises(ConfigError, match=r"^cannot parse overrides: ") as raised:
        expand_sweep(["trainer.lr=(0.1"])
    assert "\n" not in str(raised.value)
