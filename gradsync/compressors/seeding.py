"""Generators seeded from integers every process derives alike (never ``hash()``, which Python
randomizes per process)."""

from __future__ import annotations

import zlib

import torch

_MULTIPLIERS = (0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F)


def mixed_seed(*parts: int | str) -> int:
    """One 63-bit seed from ``parts`` (strings through CRC-32), so nearby tuples do not collide."""
    mixed = 0
    for i, part in enumerate(parts):
        value = zlib.crc32(part.encode()) if isinstance(part, str) else part
        mixed = mixed * _MULTIPLIERS[i % len(_MULTIPLIERS)] + value
    return mixed % (1 << 63)


def seeded_generator(*parts: int | str, device: torch.device) -> torch.Generator:
    """A generator on ``device`` seeded by ``mixed_seed(*parts)``."""
    gen = torch.Generator(device=device)
    gen.manual_seed(mixed_seed(*parts))
    return gen
