"""What torch.distributed hands a rank that is not in a group, as an error.

``dist.new_group`` returns ``GroupMember.NON_GROUP_MEMBER`` (an int) and ``isend``/``irecv``
return None to a rank outside the group. Every such call in gradsync is made by members, so
either answer is a bug, said where it happens rather than as a later attribute error.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch.distributed as dist


def member_group(made: dist.ProcessGroup | int) -> dist.ProcessGroup:
    """The group ``dist.new_group`` returned to a rank it includes."""
    if not isinstance(made, dist.ProcessGroup):
        raise RuntimeError("this rank is not a member of the process group it made")
    return made


def member_work(work: dist.Work | None) -> dist.Work:
    """The handle ``isend``/``irecv`` returned to a rank of the group."""
    if work is None:
        raise RuntimeError("this rank sent or received outside its process group")
    return work


def wait_all(works: Iterable[dist.Work | None]) -> None:
    """Wait for each of the point-to-point operations this rank started, in order."""
    for work in works:
        member_work(work).wait()
