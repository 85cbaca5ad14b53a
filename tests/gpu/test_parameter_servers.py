"""Parameter servers with GPU workers: the servers stay on the host and talk gloo, the workers
compute on their GPUs and share an NCCL group, or a gloo one where 2 or 4 of them share one GPU
(``gradsync/cluster/backends.py``). ps_bsp ending where the flat all-reduce does is
``test_scheduler_equivalence.py``'s (its entry says it trains as the all-reduce does); here
ps_bsp, the asynchronous servers and OSP, with its background synchronization in flight beside
the next step, must run to the end, and a compressor's context made on a GPU must reach a server
that has none."""

from __future__ import annotations

import pickle

import pytest
import torch

from gradsync.compressors.sparse import SparseCtx
from gradsync.schedulers.ps.host import pickled
from tests.helpers.cli import final_params, run_completed
from tests.helpers.gpu import Placement, needs_gpus, placed, trained_windows

STEPS = 30
COMMON = [
    "model=mlp",
    "compressor=none",
    f"trainer.max_steps={STEPS}",
    "trainer.log_every=10",
    "trainer.comm_timeout_s=30",  # a hang fails the run within half a minute
]
SCHEDULERS = {
    "ps_bsp": ["scheduler=ps_bsp"],
    "asp": ["scheduler=asp"],
    "osp": ["scheduler=osp", "scheduler.budget=0.5"],  # layers in the background from step 1
}
CASES = placed(SCHEDULERS)


@pytest.mark.parametrize(("placement", "name"), CASES)
def test_servers_run_to_the_end_with_gpu_workers(
    gradsync_cmd, cli_env, tmp_path, placement: Placement, name
):
    overrides = [*SCHEDULERS[name], *COMMON, *placement.overrides]
    run_dir = run_completed(gradsync_cmd, placement.env(cli_env), tmp_path / "run", *overrides)
    windows = trained_windows(run_dir, STEPS)
    if name == "osp":
        assert windows[-1]["sched/ics_bytes"] > 0  # the background group carried layers
    assert all(torch.isfinite(v).all() for v in final_params(run_dir).values())


@needs_gpus(1)
def test_a_context_made_on_the_gpu_reaches_a_server_on_the_host():
    """A compressor's context keeps its tensors on the worker's GPU (selected indices, agreed
    scales); a push carries host copies, which a server can unpickle without a GPU."""
    indices = torch.tensor([3, 1, 4], device="cuda")
    ctx = pickle.loads(pickled(SparseCtx(indices=indices, shape=torch.Size([8]))))
    assert ctx.indices.device.type == "cpu" and ctx.indices.tolist() == [3, 1, 4]
