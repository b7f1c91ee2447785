"""The storage side of FluxonFS: access checks and reads inside export roots.

The agent server serves these over HTTP; an export without an agent_url is
served by the same object in-process, so both routes apply the same checks:
the bearer token must name an identity on the export's access list, the path
must stay inside the root (no '..', no absolute paths, no NUL bytes, no
symlink leading out), and only regular files are read. A read names the
version the caller expects (size, mtime_ns, ctime_ns, inode) and is refused
if the file changed: ctime cannot be set by a user, so a rewrite that
restores size and mtime is still a new version.

Every OS error becomes a clean refusal (not found, or a bad request for a
name the OS cannot take) whose message names export:relpath only, never a
path on the storage host.
"""

from __future__ import annotations

import errno
import os
import stat as stat_mod
from dataclasses import dataclass

from fluxon_video.errors import (
    FluxonFsBadRequestError,
    FluxonFsError,
    FluxonFsFileChangedError,
    FluxonFsNotFoundError,
    FluxonFsPermissionError,
    FluxonFsShortReadError,
)
from fluxon_video.fs.config import FluxonFsConfig, FluxonFsExport
from fluxon_video.fs.listing import list_page
from fluxon_video.fs.paths import check_relpath

MAX_CHUNK_BYTES = 64 << 20


@dataclass(frozen=True)
class FileStat:
    """A file version: what cache keys and version checks are built from.

    Any change the storage host can see (size, mtime, ctime, inode) is a new
    version.
    """

    size: int
    mtime_ns: int
    ctime_ns: int = 0
    inode: int = 0

    @classmethod
    def of(cls, st: os.stat_result) -> FileStat:
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)

    def describe_change(self, current: FileStat) -> str:
        changed = [f"{name} {getattr(self, name)} -> {getattr(current, name)}"
                   for name in ("size", "mtime_ns", "ctime_ns", "inode")
                   if getattr(self, name) != getattr(current, name)]
        return ", ".join(changed) or "no change"


def _refusal(exc: OSError, name: str) -> Exception:
    """The clean refusal for an OS error on name (export:relpath): no host path in it."""
    if exc.errno in (errno.ENAMETOOLONG, errno.EINVAL):
        return FluxonFsBadRequestError(f"{name}: the storage host cannot take this name "
                                       f"({os.strerror(exc.errno)})")
    reason = os.strerror(exc.errno) if exc.errno else type(exc).__name__
    return FluxonFsNotFoundError(f"{name}: cannot be read ({reason})")


class ExportStorage:
    """Serves stat and read_chunk for the exports of a config, with access checks."""

    def __init__(self, config: FluxonFsConfig) -> None:
        self.config = config
        self._identity_by_token = {token: name for name, token in config.identities.items()}

    def authorize(self, export_name: str, token: str | None) -> tuple[FluxonFsExport, str]:
        """The export and the caller's identity name, or a permission/not-found error."""
        export = self.config.export(export_name)
        identity = self._identity_by_token.get(token or "")
        if identity is None:
            raise FluxonFsPermissionError(f"{export_name}: unknown or missing bearer token")
        if identity not in export.allow:
            raise FluxonFsPermissionError(
                f"{export_name}: identity {identity!r} is not allowed to read this export")
        return export, identity

    def _resolve(self, export: FluxonFsExport, relpath: str) -> tuple[str, str]:
        """(path on this host, export:relpath) for a relpath inside the export root."""
        relpath = check_relpath(relpath)
        name = f"{export.name}:{relpath}"
        try:
            root = os.path.realpath(export.root)
            path = os.path.realpath(os.path.join(root, relpath))
        except OSError as exc:  # a symlink loop or an over-long name, on some Pythons
            raise _refusal(exc, name) from None
        if os.path.commonpath([root, path]) != root:
            raise FluxonFsPermissionError(f"{name}: resolves outside the export root")
        return path, name

    def stat(self, export_name: str, relpath: str, token: str | None) -> FileStat:
        export, _ = self.authorize(export_name, token)
        path, name = self._resolve(export, relpath)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            raise FluxonFsNotFoundError(f"{name}: no such file") from None
        except OSError as exc:
            raise _refusal(exc, name) from None
        if not stat_mod.S_ISREG(st.st_mode):
            raise FluxonFsNotFoundError(f"{name}: not a regular file")
        return FileStat.of(st)

    def list(self, export_name: str, prefix: str, recursive: bool, pattern: str | None,
             cursor: str | None, limit: int, token: str | None) -> tuple[list, str | None]:
        """One page of the export's files under prefix (see fs/listing.py)."""
        export, _ = self.authorize(export_name, token)
        try:
            return list_page(export_name, export.root, prefix, recursive, pattern, cursor, limit)
        except OSError as exc:
            if isinstance(exc, FluxonFsError):
                raise
            raise _refusal(exc, f"{export_name}:{prefix}") from None

    def read_chunk(self, export_name: str, relpath: str, offset: int, length: int,
                   expected: FileStat, token: str | None) -> bytes:
        export, _ = self.authorize(export_name, token)
        path, name = self._resolve(export, relpath)
        if offset < 0 or length < 0 or length > MAX_CHUNK_BYTES:
            raise FluxonFsBadRequestError(f"{name}: bad range offset={offset} length={length}")
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
