"""Names of the sparsifiers' string options, shared by their schemas and implementations
(torch-free, so the CLI can validate without importing torch)."""

EXCHANGES = ("union", "allgather")
"""How locally selected indices travel: see ``exchange.py``."""

SCOPES = ("global", "layer")
"""Top-k over the whole flattened model, or inside every tensor."""
