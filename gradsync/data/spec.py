"""What a model needs to know about its data, handed to model constructors at build time."""

from __future__ import annotations

from dataclasses import dataclass

from torch.utils.data import Dataset


@dataclass(frozen=True)
class DataSpec:
    """Shapes and sizes a model is built for. Fields a task does not use stay 0 / empty.

    Batch conventions per task (what the dataset yields and the model takes):
    * ``classification``: ``(x, y)``; ``model(x) -> logits (B, num_classes)``.
    * ``language_model``: ``(inputs, targets)`` token ids of shape (B, T), targets shifted by
      one; ``model(inputs) -> logits (B, T, vocab_size)``.
    * ``recommendation``: train ``(users, items, labels)`` with labels 0/1 (float);
      eval ``(users, candidates)`` with candidates (B, C), the held-out positive in column 0;
      ``model(users, items) -> logits (B,)`` for 1-D users/items.
    """

    task: str
    num_classes: int = 0
    input_shape: tuple[int, ...] = ()
    vocab_size: int = 0
    seq_len: int = 0
    """Tokens per sample (language models)."""
    num_users: int = 0
    num_items: int = 0


@dataclass(frozen=True)
class DataSplits:
    """A dataset's splits: map-style datasets (``split[i]`` is one sample). A split held in
    memory is a ``memory.InMemorySplit``, which the training loop cuts into batches on the
    worker's device; any other is read by loader processes (``feeds.py``)."""

    spec: DataSpec
    train: Dataset
    test: Dataset
