"""``gradsync simulate`` as a user runs it: profiles the model here, predicts every compressor ×
scheduler, projects them to other clusters and draws the plots; one-line errors with exit 2."""

from __future__ import annotations

import re
import struct
import time

import pytest
import torch

from gradsync.cli import simulate
from gradsync.measure.measured import read
from gradsync.schedulers.engine.profiling import profile_tensors
from tests.helpers.cli import run_cli

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ROW = re.compile(
    r"^(\S+ × \S+(?: scheduler\.\S+)?)\s+([\d.]+)\s+([\d,]+)\s+([\d.]+)\s+(\d+|-)\s+([\d.]+)x$",
    re.M,
)


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_simulate_predicts_every_combination_projects_and_draws(gradsync_cmd, cli_env, tmp_path):
    plot, timeline = tmp_path / "projection.png", tmp_path / "timeline.png"
    measurements = tmp_path / "measured.json"
    job = (
        "model=mlp", "trainer.workers=2",
        "runner=netem", "runner.bandwidth=100mbit", "runner.second_bandwidth=50mbit",
    )  # fmt: skip
    result = run_cli(
        gradsync_cmd, "simulate", *job,
        "--compressors", "none,topk", "--schedulers", "allreduce,wfbp,deft,omgs,osp",
        "--workers", "4,64", "--bandwidths", "1gbit,10gbit", "--measurements", str(measurements),
        "--plot", str(plot), "--timeline", str(timeline), env=cli_env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "17,226 elements" in out and "profiled here alone" in out
    assert "2 workers, 100 Mbit/s links" in out and "second link 50 Mbit/s" in out
    rows = {m[1]: m for m in ROW.finditer(out.split("projected")[0])}
    assert set(rows) >= {
        "none × allreduce", "none × wfbp", "none × deft", "none × deft scheduler.links=2",
        "none × osp", "topk × allreduce", "topk × omgs scheduler.rule=optimal",
    }  # fmt: skip
    for name, row in rows.items():
        iteration_ms, samples = float(row[2]), float(row[3].replace(",", ""))
        # samples/s = batch 32 × 2 workers / iteration
        assert samples == pytest.approx(64 / (iteration_ms / 1e3), rel=0.01, abs=1), name
    assert rows["none × wfbp"][6] == "1.00"  # the baseline
    # Groups: one exchange of the whole gradient; parameter servers are not cut so.
    assert (rows["none × allreduce"][5], rows["none × osp"][5]) == ("1", "-")
    # Rows are sorted by iteration time; OMGS's optimal plan never loses to one group.
    times = [float(row[2]) for row in rows.values()]
    assert times == sorted(times)
    assert (
        float(rows["topk × omgs scheduler.rule=optimal"][2])
        <= float(rows["topk × allreduce"][2]) * 1.0001
    )
    assert "not combinable (1): topk × osp" in out  # OSP splits dense layers only
    header = next(line for line in out.splitlines() if "4@1gbit" in line)
    assert header.split()[-4:] == ["4@1gbit", "64@1gbit", "4@10gbit", "64@10gbit"]
    baseline = next(
        line for line in out.split("projected")[1].splitlines() if "none × wfbp" in line
    )
    assert baseline.split()[-4:] == ["1.00x"] * 4
    # What it measured is saved for a later call: the profile, both compressors' wire
    # formats and the probe of the shaped links (top-k all-reduces on the union of indices, so
    # OMGS microbenchmarks its link: no in-place fit to replay).
    saved = read(measurements)
    assert len(saved.profiles) == 1 and len(saved.delays) == 1 and not saved.fits
    assert {wire.compressor for wire in saved.wires.values()} >= {"none", "topk"}
    assert f"plot: {plot}" in out and f"timeline: {timeline}" in out
    assert _png_size(plot)[0] > 600
    width, height = _png_size(timeline)
    assert width > 500 and height > 400


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model=mlp", "trainer.no_such_key=1"], "no_such_key"),
        (["model=mlp", "--timeline", "out.txt"], "must end in .png"),
        (["model=mlp", "--fast"], "unknown option --fast"),
        (["model=mlp", "--compressors", "zip"], "unknown compressor zip; valid: bf16"),
        (["model=mlp", "--workers", "4,x"], "not a list of worker counts"),
        (["model=mlp", "--algorithm", "butterfly"], "valid: ring, tree"),
        (["model=mlp", "--compute-scale", "0"], "compute scale must be in (0, 1000], got 0.0"),
        (["model=mlp", "--warmup-steps", "many"], "'many' is not a whole number"),
        (["model=mlp", "--measurements", "measured.txt"], "must end in .json"),
        (["model=mlp", "compressor.densty=0.1"], "no compressor of this comparison"),
        (["model=mlp", "--cluster", "missing.yaml"], "missing.yaml: no such file"),
        (["model=mlp", "--selection", "topk"], "give COMPRESSOR=SECONDS"),
        (["model=mlp", "--selection", "zip=1e-9"], "selection.zip: no such compressor"),
        (["model=mlp", "--collective", "allgather=1,2"], "COLLECTIVE one of all_reduce"),
        (["model=mlp", "--compute", "0.1", "--compute-scale", "0.5"], "give one"),
    ],
    ids=[
        "unknown-key",
        "timeline-suffix",
        "unknown-option",
        "compressor",
        "workers",
        "algorithm",
        "compute-scale",
        "warmup-steps",
        "measurements-suffix",
        "compressor-option",
        "cluster-file",
        "selection-form",
        "selection-compressor",
        "collective",
        "two-speeds",
    ],
)
def test_simulate_rejects_bad_input_with_one_line_and_exit_2(gradsync_cmd, cli_env, args, message):
    result = run_cli(gradsync_cmd, "simulate", *args, env=cli_env)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stderr.startswith("gradsync: error: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not result.stdout


def test_simulate_refuses_numbers_files_and_yaml_that_cannot_work_at_once(
    gradsync_cmd, cli_env, tmp_path
):
    """Each bad input is one line and exit 2, said before anything is measured (which takes
    half a minute): at parse time, or on reading the cluster file."""
    bomb = tmp_path / "bomb.yaml"  # a million nodes once its aliases are expanded
    lines = [
        f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n" for a, b in zip("abcde", "bcdef", strict=True)
    ]
    bomb.write_text("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(lines))
    folder = tmp_path / "cluster.yaml"
    folder.mkdir()
    cases = {
        "--latency nan": "argument --latency: latency must be",
        f"--cluster {bomb}": f"{bomb}: line 2: YAML aliases (*a) are not supported",
        f"--cluster {folder}": f"{folder} is a directory; give a YAML cluster description file",
        "--bandwidths 0mbit": "--bandwidths: bandwidth '0mbit' must be above 0",
    }
    for option, message in cases.items():
        started = time.monotonic()
        result = run_cli(gradsync_cmd, "simulate", "model=mlp", *option.split(), env=cli_env)
        took = time.monotonic() - started
        assert result.returncode == 2, (option, result.stderr)
        assert result.stderr.startswith("gradsync: error: ") and message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and not result.stdout
        assert took < 15, (option, took)  # a start-up (about 1 s alone), not a measurement


def test_simulate_sets_compressor_options_and_predicts_a_described_cluster(
    gradsync_cmd, cli_env, tmp_path
):
    cluster, measurements = tmp_path / "cluster.yaml", tmp_path / "measured.json"
    cluster.write_text(
        "workers: 8\n"
        "compute: {seconds: 0.1}\n"
        "selection: {topk: {d_log2_d: 1e-9}}\n"
        "collectives: {all_reduce: [{alpha: 0.05, beta: 1e-9}]}\n"
    )

    def simulate(*options: str) -> dict[str, re.Match[str]]:
        result = run_cli(
            gradsync_cmd, "simulate", "model=mlp", "compressor.density=0.05",
            "--compressors", "none,topk", "--schedulers", "allreduce,mgs",
            "--cluster", str(cluster), "--measurements", str(measurements), *options,
            env=cli_env,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert "cluster: 8 workers" in out and "all processes on this host" not in out
        assert "0.1 s of compute per iteration" in out and "topk compresses in 1e-09" in out
        return {m[1]: m for m in ROW.finditer(out)}

    rows = simulate("--collective", "all_gather=0.02,2e-9@8")
    assert set(rows) == {"none × allreduce", "topk × allreduce", "none × mgs", "topk × mgs"}
    assert rows["none × allreduce"][5] == rows["topk × allreduce"][5] == "1"
    # The option replaces the file's fit for every count: each dense all-reduce starts 100 ms
    # later, one per group, the rest measured once and kept.
    # (top-k all-gathers its indices and all-reduces their union's values: one of each).
    slower = simulate(
        "--collective", "all_gather=0.02,2e-9@8", "--collective", "all_reduce=0.15,1e-9"
    )
    for name, row in rows.items():
        added = float(slower[name][2]) - float(row[2])
        assert added == pytest.approx(100.0 * int(row[5]), abs=0.01), name


def test_simulate_help_names_its_options(capsys):
    assert simulate.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--timeline FILE.png" in out and "--workers" in out and "--algorithm" in out
    assert "--compute-scale F" in out and "--warmup-steps N" in out


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
