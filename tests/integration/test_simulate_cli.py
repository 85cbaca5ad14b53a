"""``gradsync simulate`` as a user runs it: profiles the model here, prints every schedule's
simulated iteration and draws the timelines; one-line errors with exit 2 on bad input."""

from __future__ import annotations

import re
import struct

import pytest
import torch
from omegaconf import OmegaConf

from gradsync import simulate_cli
from gradsync.config.compose import ConfigError
from gradsync.sync.profiling import profile_tensors
from tests.helpers.cli import run_cli

SCHEDULE_ROWS = ("wfbp", "bytescheduler", "usbyte", "deft", "deft-2links")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_simulate_prints_every_schedule_and_draws_a_png(gradsync_cmd, cli_env, tmp_path):
    png = tmp_path / "timeline.png"
    result = run_cli(
        gradsync_cmd, "simulate", "model=mlp", "scheduler=deft", "scheduler.partition_size=3000",
        "runner=netem", "runner.bandwidth=100mbit", "runner.second_bandwidth=50mbit",
        "trainer.workers=4",
        "--timeline", str(png), env=cli_env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    # 17,226 elements of the MLP in buckets of 3,000: six buckets.
    assert "17,226 elements" in out and "buckets: 6 of up to 3,000 elements" in out
    assert "workers: 4" in out and "link 1 100mbit, link 2 50mbit" in out and "mu=2 " in out
    rows = {}
    for name in SCHEDULE_ROWS:
        match = re.search(rf"^{re.escape(name)}\s+([\d.]+)\s+([\d,]+)\s+([\d.]+)%", out, re.M)
        assert match, f"no row for {name} in:\n{out}"
        rows[name] = float(match.group(1)), float(match.group(2).replace(",", ""))
    for iteration_ms, samples in rows.values():
        # samples/s = batch 32 × 4 workers / iteration
        assert samples == pytest.approx(32 * 4 / (iteration_ms / 1e3), rel=0.01, abs=1)
    assert f"timeline: {png}" in out
    data = png.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 500 and height > 500  # five lane charts


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model=mlp", "trainer.no_such_key=1"], "no_such_key"),
        (["model=mlp", "--timeline", "out.txt"], "must end in .png"),
        (["model=mlp", "--fast"], "unknown option --fast"),
    ],
    ids=["unknown-key", "timeline-suffix", "unknown-option"],
)
def test_simulate_rejects_bad_input_with_one_line_and_exit_2(gradsync_cmd, cli_env, args, message):
    result = run_cli(gradsync_cmd, "simulate", *args, env=cli_env)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stderr.startswith("gradsync: error: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not result.stdout


def test_simulate_help_names_the_timeline_option(capsys):
    assert simulate_cli.main(["--help"]) == 0
    assert "--timeline FILE.png" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("runner", "scheduler", "second", "mu"),
    [
        ({}, {}, 1000 / 1.65, 1.65),  # no shaped link: 1gbit, and the paper's μ
        ({"bandwidth": "100mbit"}, {"mu": 2.0}, 50.0, 2.0),
        ({"bandwidth": "100mbit", "second_bandwidth": "25mbit"}, {"mu": 2.0}, 25.0, 4.0),
    ],
)
def test_the_second_link_comes_from_the_runner_else_from_mu(runner, scheduler, second, mu):
    cfg = OmegaConf.create({"runner": runner, "scheduler": scheduler})
    _, fast, _, slow = simulate_cli._rates(cfg)
    assert slow == pytest.approx(second) and fast / slow == pytest.approx(mu)


def test_a_bad_second_bandwidth_is_a_config_error():
    cfg = OmegaConf.create({"runner": {"second_bandwidth": "fast"}, "scheduler": {}})
    with pytest.raises(ConfigError, match=r"runner\.second_bandwidth 'fast'"):
        simulate_cli._rates(cfg)


def test_ring_allreduce_costs():
    alpha, beta = simulate_cli.ring_allreduce(rate_mbit=1000, workers=4)
    # 2(n − 1) = 6 steps of 1/4 of the payload: 1.5 payloads cross one 1 Gbit/s link.
    assert alpha == pytest.approx(6 * simulate_cli.HOP_LATENCY_S)
    assert beta == pytest.approx(1.5 * 8 / 1e9)
    assert simulate_cli.ring_allreduce(rate_mbit=1000, workers=1) == (0.0, 0.0)


def test_profile_tensors_times_every_tensor_in_backward_order():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 2)
    )
    x = torch.randn(256, 256)
    forward, backward = profile_tensors(model, lambda: model(x).square().mean(), steps=3)
    assert len(forward) == len(backward) == 4  # bias, weight of the last layer first
    assert all(t >= 0 for t in forward + backward) and sum(forward) > 0 and sum(backward) > 0
    # The 256×1024 layer's weight does most of the forward work (500× the last layer's).
    assert forward[3] > forward[1] and forward[3] > forward[0]
    assert not model._forward_hooks and not model[0]._forward_hooks  # hooks removed
