"""Defaults shared by more than one layer (one definition each)."""

# One FluxonFS KV piece is one reader page. About 256 KiB: the piece-size
# sweep of bench/matrix.py --suite local fetched 1.1-1.2x the bytes sparse
# clips need at 256 KiB against up to 1.8x at 1 MiB, in the same time. 64 bytes short of 256 KiB:
# a Redis value of exactly 2^18 bytes plus its header lands in the allocator's
# next size class, and `MEMORY USAGE` measured 328,072 bytes per piece against
# 262,536 at 262,080 bytes (25% against 0.2% overhead, tests/test_cluster.py).
PAGE_SIZE = 256 * 1024 - 64

# How far a time may sit from a frame's pts and still name that frame (the
# ``tolerance_s=`` of every read by time; docs/frame-index.md, "Frames by
# time"). Times that passed through float32 (LeRobot's parquet rows, JSON,
# torch tensors) are off by half a float32 ulp (at most 3.1e-5 s below 1024 s,
# 6.1e-5 s below 2048 s), a float32 sum of two (from_timestamp + timestamp) by
# up to 1.5 ulp (6.5e-5 s measured below 1024 s): 1e-4 s holds them below
# 1024 s (17 minutes) for sums, 2048 s for single times. It is LeRobot's own
# default, 1/333 of a frame interval at 30 fps, and makes two frames ambiguous
# only when they are closer than 2e-4 s (above 5 kHz).
TIME_TOLERANCE_S = 1e-4
