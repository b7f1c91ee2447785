"""The first origin: a directory on this host (an agent's, or the trainer's).

Paths stay inside the root: every lookup walks down from a descriptor of the
root, a component at a time, never following a symlink the kernel's way
(fs/paths.py resolves them itself, beneath the root, and refuses one leading
out), so there is no window between a check and an open for a swapped
component to slip through. Only regular files are read, and a read checks the
version on the open descriptor: ctime cannot be set by a user, so a rewrite
that restores size and mtime is still a new version. Every OS error becomes a
clean refusal naming export:relpath, never a path on this host.
"""

from __future__ import annotations

import errno
import os
import stat as stat_mod
from typing import TypeVar

from fluxon_video.errors import (
    FluxonFsBadRequestError,
    FluxonFsError,
    FluxonFsFileChangedError,
    FluxonFsNotFoundError,
    FluxonFsShortReadError,
)
from fluxon_video.fs.listing import FluxonFsFileEntry, list_page
from fluxon_video.fs.origin import FileStat
from fluxon_video.fs.paths import (Leaf, name_of, open_root, raise_if_exhausted,
                                   resolve_beneath, stat_leaf)

T = TypeVar("T")

# O_NONBLOCK: opening a FIFO (or a device) must not wait for a writer; the type
# is then checked on the descriptor. O_NOFOLLOW: a symlink is resolved by
# resolve_beneath, never by the kernel.
_READ_FLAGS = (os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW)


def _refusal(exc: OSError, name: str) -> Exception:
    """The clean refusal for an OS error on name (export:relpath): no host path in it."""
    raise_if_exhausted(exc, name)
    if exc.errno in (errno.ENAMETOOLONG, errno.EINVAL):
        return FluxonFsBadRequestError(f"{name}: the storage host cannot take this name "
                                       f"({os.strerror(exc.errno)})")
    reason = os.strerror(exc.errno) if exc.errno else type(exc).__name__
    return FluxonFsNotFoundError(f"{name}: cannot be read ({reason})")


def _open_leaf(dir_fd: int, name: str) -> int:
    """A leaf for resolve_beneath: name opened for reading, a symlink ELOOP (followed)."""
    return os.open(name, _READ_FLAGS, dir_fd=dir_fd)


class PosixOrigin:
    """The files under one directory."""

    def __init__(self, export_name: str, root: str) -> None:
        self.export_name = export_name
        self.root = root

    def _beneath(self, relpath: str, name: str, leaf: Leaf[T]) -> T:
        """leaf at relpath, beneath the root (see fs/paths.py); OS errors propagate.
        The root is opened for each lookup, so a root replaced meanwhile (a new
        tree moved over it) is served at once, and no descriptor outlives a call."""
        root_fd = open_root(self.root)
        try:
            return resolve_beneath(root_fd, self.root, relpath, name, leaf)
        finally:
            os.close(root_fd)

    def stat(self, relpath: str, name: str) -> FileStat:
        try:
            st = self._beneath(relpath, name, stat_leaf)
        except FluxonFsError:  # resolves outside the root (a PermissionError too)
            raise
        except (FileNotFoundError, NotADirectoryError):
            raise FluxonFsNotFoundError(f"{name}: no such file") from None
        except OSError as exc:
            raise _refusal(exc, name) from None
        if not stat_mod.S_ISREG(st.st_mode):
            raise FluxonFsNotFoundError(f"{name}: not a regular file")
        return FileStat.of(st)

    def stat_head(self, relpath: str, name: str, length: int) -> tuple[FileStat, bytes]:
        """The stat and the first ``length`` bytes (fewer in a shorter file) of one
        version: both from one open descriptor."""
        fd, st = self._open_regular(relpath, name,
                                    FluxonFsNotFoundError(f"{name}: no such file"))
        try:
            data = os.pread(fd, min(length, st.st_size), 0)
        except OSError as exc:
            raise _refusal(exc, name) from None
        finally:
            os.close(fd)
        return FileStat.of(st), data

    def _open_regular(self, relpath: str, name: str,
                      missing: FluxonFsError) -> tuple[int, os.stat_result]:
        """A descriptor of the regular file at relpath and its stat (``missing``
        raised if there is none); the caller closes it."""
        try:
            fd = self._beneath(relpath, name, _open_leaf)
        except FluxonFsError:
            raise
        except (FileNotFoundError, NotADirectoryError):
            raise missing from None
        except OSError as exc:
            raise _refusal(exc, name) from None
        try:
            st = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            raise _refusal(exc, name) from None
        if not stat_mod.S_ISREG(st.st_mode):
            os.close(fd)
            raise FluxonFsNotFoundError(f"{name}: not a regular file")
        return fd, st

    def read_range(self, relpath: str, name: str, offset: int, length: int,
                   expected: FileStat) -> bytes:
        fd, st = self._open_regular(relpath, name,
                                    FluxonFsFileChangedError(f"{name}: the file is gone"))
        try:
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
            raise _refusal(exc, name_of(self.export_name, prefix)) from None
