"""The first origin: a directory on this host (an agent's, or the trainer's).

Paths stay inside the root (a symlink leading out is refused), only regular
files are read, and a read checks the version on the open descriptor: ctime
cannot be set by a user, so a rewrite that restores size and mtime is still
a new version. Every OS error becomes a clean refusal naming export:relpath,
never a path on this host.
"""

from __future__ import annotations

import errno
import os
import stat as stat_mod

from fluxon_video.errors import (
    FluxonFsBadRequestError,
    FluxonFsError,
    FluxonFsFileChangedError,
    FluxonFsNotFoundError,
    FluxonFsPermissionError,
    FluxonFsShortReadError,
)
from fluxon_video.fs.listing import FluxonFsFileEntry, list_page
from fluxon_video.fs.origin import FileStat


def _refusal(exc: OSError, name: str) -> Exception:
    """The clean refusal for an OS error on name (export:relpath): no host path in it."""
    if exc.errno in (errno.ENAMETOOLONG, errno.EINVAL):
        return FluxonFsBadRequestError(f"{name}: the storage host cannot take this name "
                                       f"({os.strerror(exc.errno)})")
    reason = os.strerror(exc.errno) if exc.errno else type(exc).__name__
    return FluxonFsNotFoundError(f"{name}: cannot be read ({reason})")


class PosixOrigin:
    """The files under one directory."""

    def __init__(self, export_name: str, root: str) -> None:
        self.export_name = export_name
        self.root = root

    def _path(self, relpath: str, name: str) -> str:
        """The path on this host of a relpath inside the root."""
        try:
            root = os.path.realpath(self.root)
            path = os.path.realpath(os.path.join(root, relpath))
        except OSError as exc:  # a symlink loop or an over-long name, on some Pythons
            raise _refusal(exc, name) from None
        if os.path.commonpath([root, path]) != root:
            raise FluxonFsPermissionError(f"{name}: resolves outside the export root")
        return path

    def stat(self, relpath: str, name: str) -> FileStat:
        path = self._path(relpath, name)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            raise FluxonFsNotFoundError(f"{name}: no such file") from None
        except OSError as exc:
            raise _refusal(exc, name) from None
        if not stat_mod.S_ISREG(st.st_mode):
            raise FluxonFsNotFoundError(f"{name}: not a regular file")
        return FileStat.of(st)

    def read_range(self, relpath: str, name: str, offset: int, length: int,
                   expected: FileStat) -> bytes:
        path = self._path(relpath, name)
        try:
            # O_NONBLOCK: opening a FIFO (or a device) must not wait for a writer;
            # the type is then checked on the descriptor, not on the path.
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
        except (FileNotFoundError, NotADirectoryError):
            raise FluxonFsFileChangedError(f"{name}: the file is gone") from None
        except OSError as exc:
            raise _refusal(exc, name) from None
        try:
            st = os.fstat(fd)
            if not stat_mod.S_ISREG(st.st_mode):
                raise FluxonFsNotFoundError(f"{name}: not a regular file")
            current = FileStat.of(st)
            if current != expected:
                raise FluxonFsFileChangedError(
                    f"{name}: the file changed ({expected.describe_change(current)})")
            if offset + length > st.st_size:
                raise FluxonFsBadRequestError(
                    f"{name}: range {offset}+{length} is past the end ({st.st_size} bytes)")
            data = os.pread(fd, length, offset)
        except FluxonFsError:
            raise
        except OSError as exc:
            raise _refusal(exc, name) from None
        finally:
            os.close(fd)
        if len(data) != length:
            raise FluxonFsShortReadError(f"{name}: read {len(data)} of {length} bytes at {offset}")
        return data

    def list_page(self, prefix: str, recursive: bool, pattern: str | None, cursor: str | None,
                  limit: int) -> tuple[list[FluxonFsFileEntry], str | None]:
        try:
            return list_page(self.export_name, self.root, prefix, recursive, pattern, cursor,
                             limit)
        except OSError as exc:
            if isinstance(exc, FluxonFsError):
                raise
            raise _refusal(exc, f"{self.export_name}:{prefix}") from None
