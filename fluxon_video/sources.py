"""Range sources: what a ByteSource fetches pages from.

A range source is any object with ``read_range(offset, length) -> bytes`` and
a ``size``; it must return exactly ``length`` bytes for a range inside the
file. Fetch workers call it with the GIL held, never FFmpeg's callbacks.
``fluxon_video.open_video`` reads any of them (a local file, bytes, a file
object, or your own class) with the same reader as a FluxonFS export.
"""

from __future__ import annotations

import io
import os
import threading
from stat import S_ISREG
from typing import IO, Protocol, runtime_checkable

from fluxon_video.errors import (
    FluxonFsBadRequestError,
    FluxonFsClosedError,
    FluxonFsFileChangedError,
    FluxonFsNotFoundError,
    FluxonFsPermissionError,
    FluxonFsShortReadError,
)


@runtime_checkable
class RangeSource(Protocol):
    size: int

    def read_range(self, offset: int, length: int) -> bytes: ...


def _version_of(stat: os.stat_result) -> tuple[int, ...]:
    """A file version as a stat sees it: the same path rewritten, replaced or on
    another device is another version."""
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


class LocalFileRangeSource:
    """A local file read with pread, so concurrent fetches need no shared offset."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.name = os.fspath(path)
        try:
            # O_NONBLOCK: opening a FIFO must not wait for a writer; the type is
            # checked on the descriptor, so a path swapped meanwhile is caught too.
            self._fd = os.open(self.name, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
        except (FileNotFoundError, NotADirectoryError):
            raise FluxonFsNotFoundError(f"{self.name}: no such file") from None
        except PermissionError:
            raise FluxonFsPermissionError(f"{self.name}: permission denied") from None
        except OSError as exc:  # a symlink loop, a name too long: as the agent says it
            raise FluxonFsNotFoundError(f"{self.name}: cannot be opened "
                                        f"({exc.strerror or exc})") from None
        stat = os.fstat(self._fd)
        if not S_ISREG(stat.st_mode):
            os.close(self._fd)
            self._fd = -1
            raise FluxonFsNotFoundError(f"{self.name}: not a regular file")
        self.size = stat.st_size
        self.mtime_ns = stat.st_mtime_ns
        # This version of this file: what check_current compares, and the key of
        # its index in the per-process cache (index_cache.py).
        self.identity = _version_of(stat)
        self._lock = threading.Lock()

    def check_current(self) -> None:
        """FluxonFsFileChangedError if the path is no longer the file opened."""
        try:
            st = os.stat(self.name)
        except OSError:
            raise FluxonFsFileChangedError(f"{self.name}: the file is gone") from None
        if _version_of(st) != self.identity:
            raise FluxonFsFileChangedError(f"{self.name}: the file changed since it was opened")

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


class FileObjectRangeSource:
    """A seekable binary file object (an open file, io.BytesIO, an fsspec or
    obstore file): reads take a lock, since they share the object's offset."""

    def __init__(self, fileobj: IO[bytes], name: str | None = None) -> None:
        if not (hasattr(fileobj, "read") and hasattr(fileobj, "seek")):
            raise FluxonFsBadRequestError(
                f"a file object needs read() and seek(), got {type(fileobj).__name__}")
        self._file = fileobj
        self.name = name or str(getattr(fileobj, "name", None) or f"<{type(fileobj).__name__}>")
        self._lock = threading.Lock()
        # A pipe or a socket cannot serve the ranges a demuxer seeks to.
        seekable = getattr(fileobj, "seekable", None)
        if callable(seekable) and not seekable():
            raise FluxonFsBadRequestError(f"{self.name}: the file object is not seekable")
        try:
            with self._lock:
                self.size = fileobj.seek(0, io.SEEK_END)
        except OSError as exc:
            raise FluxonFsBadRequestError(
                f"{self.name}: cannot seek to the end of the file object ({exc})") from exc

    def read_range(self, offset: int, length: int) -> bytes:
        with self._lock:
            self._file.seek(offset, io.SEEK_SET)  # whence too: a file-like class may require it
            parts, left = [], length
            while left:  # a file object may return less than asked
                chunk = self._file.read(left)
                if not chunk:
                    break
                parts.append(bytes(chunk))
                left -= len(chunk)
        data = b"".join(parts)
        if len(data) != length:
            raise FluxonFsShortReadError(f"{self.name}: read {len(data)} of {length} bytes "
                                         f"at {offset}")
        return data

    def close(self) -> None:
        pass  # the caller's object: the caller closes it

    def __repr__(self) -> str:
        return f"FileObjectRangeSource({self.name!r}, size={self.size})"
