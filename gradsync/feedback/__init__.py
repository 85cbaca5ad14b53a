"""Error feedback: memory of what a lossy compressor did not send (``feedback=`` option)."""
