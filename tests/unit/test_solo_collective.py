"""The collective of a world of one worker: collectives are the identity, and point-to-point,
which needs a peer, refuses in one line."""

from __future__ import annotations

import pytest
import torch

from gradsync.comm.solo import SoloCollective


def test_a_world_of_one_refuses_point_to_point_with_one_line():
    solo = SoloCollective()
    assert solo.world() is solo
    calls = [
        lambda: solo.send((torch.ones(1),), dst=1),
        lambda: solo.start_send((torch.ones(1),), dst=1),
        lambda: solo.recv((torch.ones(1),)),
        lambda: solo.start_recv((torch.ones(1),), src=1),
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match="point-to-point needs another rank") as raised:
            call()
        assert "\n" not in str(raised.value)
