"""Counting the large tensors a piece of code allocates, on the thread that runs it: an
operation's output counts when its memory is none of its inputs' (an ``out=`` or in-place
operation writes into an input; a view shares its input's storage) and holds at least the
given bytes. Used to check that a step reuses its buffers instead of allocating fresh ones."""

from __future__ import annotations

from typing import Any

from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def _storages(values: Any) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tree_leaves(values) if isinstance(t, Tensor)}


class LargeAllocations(TorchDispatchMode):
    """While entered: ``ops``, the name of each operation that allocated a tensor of at least
    ``nbytes`` (in this thread)."""

    def __init__(self, nbytes: int) -> None:
        super().__init__()
        self.nbytes = nbytes
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = _storages((args, kwargs))
        for tensor in tree_leaves(out):
            if not isinstance(tensor, Tensor):
                continue
            storage = tensor.untyped_storage()
            if storage.nbytes() >= self.nbytes and storage.data_ptr() not in inputs:
                self.ops.append(str(func.overloadpacket.__name__))
        return out
