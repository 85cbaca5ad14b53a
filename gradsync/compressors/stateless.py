"""The checkpointed state of a compressor that keeps nothing across steps (scratch buffers are
not state: they are refilled before they are read)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class Stateless:
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # Something saved here came from another compressor: resuming with it would be wrong.
        if state:
            raise ValueError(
                f"{type(self).__name__} keeps no state, but the checkpoint has {sorted(state)}"
            )

    def snapshot(self) -> object:
        return None

    def restore(self, snapshot: object) -> None:
        return None
