"""Range sources: what a ByteSource fetches pages from.

A range source is any object with ``read_range(offset, length) -> bytes`` and
a ``size``; it must return exactly ``length`` bytes for a range inside the
file. Fetch workers call it with the GIL held, never FFmpeg's callbacks.
"""

from __future__ import annotations

import os
import threading
from typing import Protocol, runtime_checkable

from fluxon_video.errors import FluxonFsClosedError, FluxonFsNotFoundError


@runtime_checkable
class RangeSource(Protocol):
    size: int

    def read_range(self, offset: int, length: int) -> bytes: ...


class LocalFileRangeSource:
    """A local file read with pread, so concurrent fetches need no shared offset."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.name = os.fspath(path)
        try:
            self._fd = os.open(self.name, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise FluxonFsNotFoundError(f"{self.name}: no such file") from None
        stat = os.fstat(self._fd)
        self.size = stat.st_size
        self.mtime_ns = stat.st_mtime_ns
        self._lock = threading.Lock()

    def read_range(self, offset: int, length: int) -> bytes:
        fd = self._fd
        if fd < 0:
            raise FluxonFsClosedError(f"{self.name}: the range source is closed")
        return os.pread(fd, length, offset)

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> LocalFileRangeSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalFileRangeSource({self.name!r})"


class BytesRangeSource:
    """An in-memory file."""

    def __init__(self, data: bytes, name: str = "<bytes>") -> None:
        self._data = memoryview(bytes(data))
        self.size = len(self._data)
        self.name = name

    def read_range(self, offset: int, length: int) -> bytes:
        return bytes(self._data[offset:offset + length])

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"BytesRangeSource({self.name!r}, size={self.size})"
