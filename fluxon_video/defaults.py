"""Defaults shared by more than one layer (one definition each)."""

# One FluxonFS KV piece is one reader page. 256 KiB: bench/run.py's piece-size
# sweep fetched 1.1-1.2x the bytes sparse clips need at 256 KiB against up to
# 1.8x at 1 MiB, in the same time.
PAGE_SIZE = 256 * 1024
