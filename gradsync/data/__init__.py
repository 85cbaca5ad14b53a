"""Datasets (``dataset=`` option) and how each worker reads its shard."""
