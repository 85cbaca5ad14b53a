"""The host-sync check's bookkeeping: points are counted per step, checked only from its first
step, and a point nobody declared fails the step with its name; torch.cuda's sync debug mode
(recorded here, as this machine has no GPU) is off exactly while some thread is inside a
declared point, whatever the order in which the training and communication threads come and
go."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from gradsync.comm import host_sync as host_sync_module
from gradsync.comm.host_sync import ERROR, check_syncs, host_sync, take_counts
from gradsync.jobs.compose import compose_jobs
from gradsync.schedulers.registry import SCHEDULERS
from gradsync.train.sync_check import HostSyncCheck, UndeclaredHostSync, declared_host_syncs

CPU = torch.device("cpu")


def test_points_are_counted_and_taken_once():
    take_counts()
    with host_sync("a.b"):
        pass
    with host_sync("a.b"), host_sync("c.d"):
        pass
    assert take_counts() == {"a.b": 2, "c.d": 1}
    assert take_counts() == {}


def test_a_step_that_passes_an_undeclared_point_fails_naming_it():
    check = HostSyncCheck(declared={"a.b": "why"}, device=CPU, from_step=3)
    with check.step(2), host_sync("x.y"):  # before the check starts: not checked
        pass
    with check.step(3), host_sync("a.b"):
        pass
    assert check.passed == {"a.b": 1}
    with pytest.raises(UndeclaredHostSync, match=r"step 4 .* at x\.y, .*declared: a\.b"):  # noqa: SIM117
        with check.step(4), host_sync("x.y"):
            pass


def test_points_passed_between_checked_steps_are_not_charged_to_the_next():
    check = HostSyncCheck(declared={}, device=CPU, from_step=0)
    with host_sync("x.y"):  # logging between steps, say
        pass
    with check.step(0):
        pass
    assert check.passed == {}


def test_a_job_declares_its_schedulers_and_its_compressors_points():
    (cfg,) = compose_jobs(
        ["scheduler=bytescheduler", "compressor=topk"], multirun=False, launcher_here=False
    )
    declared = declared_host_syncs(cfg)
    for point, why in SCHEDULERS["bytescheduler"].capabilities.host_syncs:
        assert declared[point] == why
    assert "union.indices" in declared  # top-k's default exchange agrees on an index set
    (dense,) = compose_jobs(["compressor=none"], multirun=False, launcher_here=False)
    assert declared_host_syncs(dense) == {}


@pytest.fixture
def debug_mode(monkeypatch) -> Iterator[list[int]]:
    """The sync debug modes set, in order (the last one is in force)."""
    modes = [0]
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    yield modes
    assert host_sync_module._inside == 0
    check_syncs(False)


def test_a_point_left_after_the_checked_step_ended_leaves_the_check_off(debug_mode):
    check_syncs(True)  # a step starts
    point = host_sync("priority.credit")  # the communication thread enters during it
    point.__enter__()
    assert debug_mode[-1] == 0
    check_syncs(False)  # the step ends; logging reads values on the host
    point.__exit__(None, None, None)
    assert debug_mode[-1] == 0


def test_a_point_entered_before_the_step_keeps_the_check_off_until_it_is_left(debug_mode):
    point = host_sync("ps.host_staging")
    point.__enter__()
    check_syncs(True)
    assert debug_mode[-1] == 0  # the declared wait must not raise
    with host_sync("priority.agreement"):  # another thread's, overlapping
        pass
    assert debug_mode[-1] == 0
    point.__exit__(None, None, None)
    assert debug_mode[-1] == ERROR  # the rest of the step is checked
    with host_sync("a.b"):
        assert debug_mode[-1] == 0
    assert debug_mode[-1] == ERROR


def test_fp16_declares_its_loss_scales_read_of_the_overflow_flag():
    (fp16,) = compose_jobs(["trainer.precision=fp16"], multirun=False, launcher_here=False)
    assert set(declared_host_syncs(fp16)) == {"amp.found_inf"}
    (bf16,) = compose_jobs(["trainer.precision=bf16"], multirun=False, launcher_here=False)
    assert declared_host_syncs(bf16) == {}
