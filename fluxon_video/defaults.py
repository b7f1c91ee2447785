"""Defaults shared by more than one layer (one definition each)."""

# One FluxonFS KV piece is one reader page. About 256 KiB: bench/run.py's
# piece-size sweep fetched 1.1-1.2x the bytes sparse clips need at 256 KiB
# against up to 1.8x at 1 MiB, in the same time. 64 bytes short of 256 KiB:
# a Redis value of exactly 2^18 bytes plus its header lands in the allocator's
# next size class, and `MEMORY USAGE` measured 328,072 bytes per piece against
# 262,536 at 262,080 bytes (25% against 0.2% overhead, tests/test_cluster.py).
PAGE_SIZE = 256 * 1024 - 64
