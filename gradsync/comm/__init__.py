"""How payloads travel between workers."""
