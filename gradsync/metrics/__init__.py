"""Metric logging (rank 0), run summaries and sweep tables.

Metric names and their meaning: docs/reference/metrics.md."""
