"""TernGrad through the CLI, as a user runs it: with 2 and 4 workers it sends at most 1/14 of the
dense bytes per step (a CNN whose classifier is under 1% of the parameters) and trains digits
within 2 points of dense SGD; without clipping it still runs. The other quantizers train and
send the bytes their formats promise."""

from __future__ import annotations

import pytest

from tests.helpers.cli import metrics, run_cli, summary

# 85,066 parameters; the 64x10 classifier kept in float is 650 of them.
MODEL = "model.channels=[32,64]"


def _sweep(gradsync_cmd, env, sweep_dir, *overrides: str) -> None:
    result = run_cli(
        gradsync_cmd, "run", "-m", *overrides, f"hydra.sweep.dir={sweep_dir}", env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def terngrad(gradsync_cmd, module_cli_env, tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("terngrad")
    _sweep(
        gradsync_cmd,
        module_cli_env,
        sweep_dir,
        "compressor=none,terngrad",
        "trainer.workers=2,4",
        MODEL,
    )
    jobs = [(c, w) for c in ("none", "terngrad") for w in (2, 4)]
    return {job: sweep_dir / str(num) for num, job in enumerate(jobs)}


@pytest.fixture(scope="module")
def others(gradsync_cmd, module_cli_env, tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("others")
    names = ["qsgd", "signsgd", "fp16", "bf16"]
    _sweep(gradsync_cmd, module_cli_env, sweep_dir, f"compressor={','.join(names)}")
    return {name: sweep_dir / str(num) for num, name in enumerate(names)}


@pytest.mark.parametrize("workers", [2, 4])
def test_terngrad_sends_at_most_a_fourteenth_of_the_dense_bytes(terngrad, workers):
    dense = metrics(terngrad[("none", workers)])
    tern = metrics(terngrad[("terngrad", workers)])
    dense_bytes = [m["comm/bytes_sent"] for m in dense if "comm/bytes_sent" in m]
    tern_bytes = [m["comm/bytes_sent"] for m in tern if "comm/bytes_sent" in m]
    assert len(tern_bytes) == len(dense_bytes) > 0
    assert max(tern_bytes) <= min(dense_bytes) / 14
    ratios = [m["comm/compression_ratio"] for m in tern if "comm/compression_ratio" in m]
    assert min(ratios) >= 14
    assert summary(terngrad[("none", workers)])["final"]["comm/compression_ratio"] == 1.0


@pytest.mark.parametrize("workers", [2, 4])
def test_terngrad_trains_digits_within_two_points_of_dense(terngrad, workers):
    dense = summary(terngrad[("none", workers)])["final"]
    tern = summary(terngrad[("terngrad", workers)])["final"]
    assert tern["eval/accuracy"] >= dense["eval/accuracy"] - 0.02
    assert tern["comm/error_norm"] == 0  # TernGrad keeps no residual (feedback=auto)


def test_terngrad_without_clipping_runs_and_reports(gradsync_cmd, cli_env, tmp_path):
    run_dir = tmp_path / "noclip"
    result = run_cli(
        gradsync_cmd,
        "run",
        "compressor=terngrad",
        "compressor.clip=0",
        MODEL,
        f"hydra.run.dir={run_dir}",
        env=cli_env,
    )
    assert result.returncode == 0, result.stderr
    final = summary(run_dir)["final"]
    assert final["eval/accuracy"] > 0.9
    assert final["comm/compression_ratio"] >= 14


@pytest.mark.slow  # four more 10-epoch runs; the unit and dist tests cover these formats
@pytest.mark.parametrize(
    ("name", "ratio"), [("qsgd", 4.0), ("signsgd", 32.0), ("fp16", 2.0), ("bf16", 2.0)]
)
def test_other_quantizers_train_and_send_what_their_format_promises(others, name, ratio):
    final = summary(others[name])["final"]
    assert final["eval/accuracy"] > 0.9
    # Per-tensor scales and the gathered lengths cost a little on top of the codes.
    assert 0.95 * ratio <= final["comm/compression_ratio"] <= ratio
    assert (final["comm/error_norm"] > 0) == (name == "signsgd")  # EF-signSGD keeps a residual
