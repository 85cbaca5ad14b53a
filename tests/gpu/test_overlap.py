"""WFBP's overlap is real on GPUs. During backward its buckets are all-reduced on the
communication stream, so the part of the exchange a step still waits for after backward
(``time/comm`` as the run logs it: on the compute stream, from the update's wait for the
completion events to their firing) is a fraction of the same exchange timed alone.

"Alone" is the same job with ``scheduler=allreduce``: the whole gradient all-reduced after
backward, nothing to hide behind, so its ``time/comm`` is the full exchange (as one message,
no slower than WFBP's three buckets sent one after another). ResNet-18 at batch 128 on 32x32
synthetic images, two GPUs: backward takes milliseconds, the 43 MB all-reduce a fraction of a
millisecond over NVLink and a few over PCIe, and DDP's bucket sizes leave only the last bucket
(the input side, 8 MB of 43) to go after backward. Each run is summarized by the median of its
log windows after the first two (first-use costs: cuDNN's choice of algorithms, NCCL's first
messages, the caching allocator's growth). A scheduler that exchanged only after backward would
wait as long as the flat all-reduce or longer, far above the 0.7 asked here. (A timing in a
test, so a ratio of two runs in one test with a wide margin; on two shared CPU cores over gloo
the same comparison, at batch 4, came out at 0.59.)
"""

from __future__ import annotations

import statistics
from pathlib import Path

from tests.helpers.cli import metrics, run_completed
from tests.helpers.gpu import needs_gpus, on_gpus

pytestmark = needs_gpus(2)

JOB = [
    "model=resnet18",
    "dataset=synthetic",
    "trainer.batch_size=128",
    "trainer.max_steps=80",
    "trainer.log_every=10",
    "trainer.checkpoint=false",
    *on_gpus(2),
]
WARM_UP_WINDOWS = 2
HIDDEN_AT_LEAST = 0.3  # of the exchange's time alone


def _comm_per_step(cmd: list[str], env: dict[str, str], run_dir: Path, *overrides: str):
    """(median ``time/comm`` over the steady windows, the windows) of one run."""
    run_completed(cmd, env, run_dir, *JOB, *overrides)
    windows = [r for r in metrics(run_dir) if "train/loss" in r][WARM_UP_WINDOWS:]
    assert len(windows) >= 5, windows
    return statistics.median(w["time/comm"] for w in windows), windows


def test_wfbp_waits_after_backward_for_less_than_the_exchange_takes_alone(
    gradsync_cmd, cli_env, tmp_path
):
    alone, _ = _comm_per_step(gradsync_cmd, cli_env, tmp_path / "allreduce", "scheduler=allreduce")
    waited, windows = _comm_per_step(gradsync_cmd, cli_env, tmp_path / "wfbp", "scheduler=wfbp")
    assert all(w["sched/groups"] > 1 for w in windows)  # buckets, not one exchange at the end
    assert alone > 0
    assert waited < (1 - HIDDEN_AT_LEAST) * alone, (
        f"wfbp waited {waited * 1e3:.3f} ms per step after backward; the exchange alone takes "
        f"{alone * 1e3:.3f} ms"
    )
