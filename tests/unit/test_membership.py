from __future__ import annotations

import pytest
import torch.distributed as dist

from gradsync.comm.membership import member_group, wait_all


class _Work:
    def __init__(self, name: str, waited: list[str]) -> None:
        self.name, self.waited = name, waited

    def wait(self) -> bool:
        self.waited.append(self.name)
        return True


def test_a_group_made_without_this_rank_is_an_error_at_once():
    with pytest.raises(RuntimeError, match="not a member"):
        member_group(dist.GroupMember.NON_GROUP_MEMBER)


def test_every_operation_is_waited_for_in_order():
    waited: list[str] = []
    wait_all([_Work("push", waited), _Work("pull", waited)])
    assert waited == ["push", "pull"]


def test_an_operation_outside_the_group_is_an_error_after_those_before_it():
    waited: list[str] = []
    with pytest.raises(RuntimeError, match="outside its process group"):
        wait_all([_Work("push", waited), None, _Work("pull", waited)])
    assert waited == ["push"]
