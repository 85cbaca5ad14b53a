"""Metric logging (rank 0), run summaries and sweep tables. Metric names: docs/reference/metrics.md."""
