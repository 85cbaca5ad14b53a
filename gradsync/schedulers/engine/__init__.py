"""What every scheduler shares: hooks, compensate -> compress -> residual, the exchange on a
communication thread, averaging, write-back and statistics."""
