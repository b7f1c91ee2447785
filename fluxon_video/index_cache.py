"""Frame indexes of local files, kept per process: a file opened again (a dataset
that opens its video for every item) loads its index instead of scanning it.

The cache holds blobs, as the KV does (FrameIndex.to_bytes): every open gets
an index object of its own, and what a reader learns of the file (damage, the
tolerant survey) is stored back as a FluxonFS reader stores it in the KV. A
key is the file's identity (device, inode, size, mtime, ctime) and the blob
kind: a file that changes is another key, and its old entry ages out.
"""

from __future__ import annotations

import os
import threading

import cachetools

# Bytes of blobs kept (least recently used dropped first): a 10-minute 30 fps
# video's index is under 1 MB, a short clip's a few KB.
MAX_BYTES = 64 << 20

_blobs: cachetools.LRUCache[tuple, bytes] = cachetools.LRUCache(maxsize=MAX_BYTES, getsizeof=len)
_lock = threading.Lock()


def _after_fork_in_child() -> None:
    # A thread of the parent may have held the lock when it forked.
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def load(identity: tuple, kind: str) -> bytes | None:
    with _lock:
        return _blobs.get((identity, kind))


def store(identity: tuple, kind: str, data: bytes) -> None:
    if len(data) <= MAX_BYTES:
        with _lock:
            _blobs[(identity, kind)] = data


def clear() -> None:
    """Forget every kept index (for tests and benchmarks of the scan)."""
    with _lock:
        _blobs.clear()
