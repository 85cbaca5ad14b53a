"""Values of the compressors' options, shared by their schemas and implementations (torch-free,
so the CLI can validate without importing torch)."""

EXCHANGES = ("union", "allgather")
"""How locally selected indices travel: see ``exchange.py``."""

SCOPES = ("global", "layer")
"""Top-k over the whole flattened model, or inside every tensor."""
QSGD_MAX_LEVELS = 127  # 2·127 + 1 codes fill a byte

DGC_SELECTIONS = ("per_tensor", "group")
"""DGC's selection scope: the top share of every tensor (the paper's), or of every group."""
