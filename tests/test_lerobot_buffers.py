"""The LeRobot dataset's reused frame buffers (fluxon_video/lerobot/buffers.py):
a buffer goes back to the pool only when nothing can read it any more."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from fluxon_video.lerobot.buffers import BufferPool

torch = pytest.importorskip("torch")


def test_a_released_buffer_is_handed_out_again():
    pool = BufferPool()
    first = pool.empty((4, 3, 8, 8), np.float32)
    address = first.__array_interface__["data"][0]
    assert first.flags.c_contiguous and first.flags.writeable
    del first
    again = pool.empty((4, 3, 8, 8), np.float32)
    assert again.__array_interface__["data"][0] == address
    assert (pool.allocated, pool.reused) == (1, 1)
    other = pool.empty((4, 3, 8, 8), np.uint8)  # another dtype: its own buffer
    assert other.__array_interface__["data"][0] != address and pool.allocated == 2


def test_a_view_of_the_tensor_keeps_its_buffer():
    """torch.from_numpy holds the array until the storage goes: a slice kept
    after the tensor is dropped must keep its values while the pool hands out
    buffers of the same shape."""
    pool = BufferPool()
    array = pool.empty((2, 5), np.float32)
    array[:] = np.arange(10, dtype=np.float32).reshape(2, 5)
    row = torch.from_numpy(array)[1]
    as_numpy = torch.from_numpy(array).numpy()[0]
    del array
    gc.collect()
    assert pool.free_bytes == 0
    fresh = pool.empty((2, 5), np.float32)
    fresh[:] = -1
    assert row.tolist() == [5, 6, 7, 8, 9] and as_numpy.tolist() == [0, 1, 2, 3, 4]
    del row, fresh
    assert pool.free_bytes == 40  # `as_numpy` still holds the first buffer
    del as_numpy
    assert pool.free_bytes == 80


def test_what_it_keeps_free_is_capped():
    pool = BufferPool(max_free_bytes=100)
    held = [pool.empty((10,), np.float32) for _ in range(3)]  # 40 bytes each
    del held
    assert pool.free_bytes == 80  # the third was freed, not kept
    pool.clear()
    assert pool.free_bytes == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_starts_empty():
    pool = BufferPool()
    kept = pool.empty((8,), np.float64)
    del kept
    assert pool.free_bytes == 64
    pid = os.fork()
    if pid == 0:  # the child: none of the parent's buffers, a working pool
        ok = pool.empty((8,), np.float64) is not None and pool.reused == 0
        os._exit(0 if ok and pool.allocated == 1 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert pool.free_bytes == 64
