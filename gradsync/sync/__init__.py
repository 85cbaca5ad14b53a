"""Synchronization strategies (``scheduler=`` option): exchange of gradients + update."""
