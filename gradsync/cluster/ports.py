"""Ports for rank 0's TCP store on this host."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now, for rank 0's TCP store (as torchrun --standalone does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
