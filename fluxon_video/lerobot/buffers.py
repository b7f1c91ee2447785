"""Frame buffers a process hands out again once nothing holds them.

An item's float clip is tens of MB (16 x 3 x 480 x 640 float32 is 59 MB). A
fresh array for each one costs the kernel a page fault and a zeroed page per
page touched; on the bench's 2 cores that was a fifth of a DataLoader's CPU
(perf: clear_page under frames_to_planes). A DataLoader drops an item's
tensors as soon as its collate has copied them, so the next batch can write
into the same, already mapped, memory.

A buffer returns to the pool only when the last reference to it is gone: the
array handed out is a view whose base is a lease, and torch.from_numpy keeps
that array (so the lease) alive until the tensor's storage is freed, whatever
views of it a transform or the caller took.
"""

from __future__ import annotations

import os
import threading

import numpy as np


class _Lease:
    """Owns one pooled buffer while an array (and its tensors) use it; gives it
    back to the pool when collected."""

    __slots__ = ("_buffer", "_pool")

    def __init__(self, buffer: np.ndarray, pool: BufferPool) -> None:
        self._buffer, self._pool = buffer, pool

    @property
    def __array_interface__(self) -> dict:
        return self._buffer.__array_interface__

    def __del__(self) -> None:
        try:
            self._pool._give_back(self._buffer)
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing to give back to
            pass


class BufferPool:
    """Arrays by shape and dtype, reused once released. It allocates only when
    no free buffer fits, so it never holds more than the most its callers held
    at once; ``max_free_bytes`` caps what it keeps while nobody uses it.
    Thread- and fork-safe (a forked child starts empty)."""

    def __init__(self, max_free_bytes: int = 2 << 30) -> None:
        self.max_free_bytes = max_free_bytes
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.RLock()  # a lease may be collected inside
        self._free: dict[tuple[tuple[int, ...], str], list[np.ndarray]] = {}
        self._free_bytes = 0
        self.reused = self.allocated = 0

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
        """An uninitialised C-contiguous array, a released buffer when one fits."""
        if self._pid != os.getpid():
            self._reset()
        key = (tuple(int(n) for n in shape), np.dtype(dtype).str)
        with self._lock:
            stack = self._free.get(key)
            buffer = stack.pop() if stack else None
            if buffer is not None:
                self._free_bytes -= buffer.nbytes
                self.reused += 1
            else:
                self.allocated += 1
        if buffer is None:
            buffer = np.empty(key[0], key[1])
        return np.asarray(_Lease(buffer, self))

    def _give_back(self, buffer: np.ndarray) -> None:
        if self._pid != os.getpid():
            return  # a parent's buffer, released in a child
        key = (buffer.shape, buffer.dtype.str)
        with self._lock:
            if self._free_bytes + buffer.nbytes > self.max_free_bytes:
                return  # dropped: freed with its last reference
            self._free.setdefault(key, []).append(buffer)
            self._free_bytes += buffer.nbytes

    @property
    def free_bytes(self) -> int:
        return self._free_bytes

    def clear(self) -> None:
        """Drop the free buffers (the ones in use return later, as usual)."""
        with self._lock:
            self._free, self._free_bytes = {}, 0
