"""The storage side of FluxonFS: access checks and reads inside export roots.

The agent server serves these over HTTP; an export without an agent_url is
served by the same object in-process, so both routes apply the same checks:
the bearer token must name an identity on the export's access list, the path
must stay inside the root (no '..', no absolute paths, no NUL bytes, no
symlink leading out), and only regular files are read. A read names the
version (size, mtime_ns) the caller expects and is refused if the file changed.
"""

from __future__ import annotations

import os
import stat as stat_mod
from dataclasses import dataclass

from fluxon_video.errors import (
    FluxonFsBadRequestError,
    FluxonFsFileChangedError,
    FluxonFsNotFoundError,
    FluxonFsPermissionError,
    FluxonFsShortReadError,
)
from fluxon_video.fs.config import FluxonFsConfig, FluxonFsExport

MAX_CHUNK_BYTES = 64 << 20


@dataclass(frozen=True)
class FileStat:
    """A file version: what cache keys and version checks are built from."""

    size: int
    mtime_ns: int


def check_relpath(relpath: object) -> str:
    """relpath if it is a plain relative path inside a root, else BadRequest."""
    if not isinstance(relpath, str) or not relpath:
        raise FluxonFsBadRequestError(f"relpath must be a non-empty string, got {relpath!r}")
    if "\x00" in relpath:
        raise FluxonFsBadRequestError(f"relpath {relpath!r} contains a NUL byte")
    if relpath.startswith("/") or os.path.isabs(relpath):
        raise FluxonFsBadRequestError(f"relpath {relpath!r} is absolute")
    if ".." in relpath.split("/"):
        raise FluxonFsBadRequestError(f"relpath {relpath!r} leaves the export root")
    return relpath


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

    def _resolve(self, export: FluxonFsExport, relpath: str) -> str:
        check_relpath(relpath)
        root = os.path.realpath(export.root)
        path = os.path.realpath(os.path.join(root, relpath))
        if os.path.commonpath([root, path]) != root:
            raise FluxonFsPermissionError(f"{export.name}:{relpath}: resolves outside the export root")
        return path

    def stat(self, export_name: str, relpath: str, token: str | None) -> FileStat:
        export, _ = self.authorize(export_name, token)
        path = self._resolve(export, relpath)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            raise FluxonFsNotFoundError(f"{export_name}:{relpath}: no such file") from None
        if not stat_mod.S_ISREG(st.st_mode):
            raise FluxonFsNotFoundError(f"{export_name}:{relpath}: not a regular file")
        return FileStat(st.st_size, st.st_mtime_ns)

    def read_chunk(self, export_name: str, relpath: str, offset: int, length: int,
                   expected: FileStat, token: str | None) -> bytes:
        export, _ = self.authorize(export_name, token)
        path = self._resolve(export, relpath)
        name = f"{export_name}:{relpath}"
        if offset < 0 or length < 0 or length > MAX_CHUNK_BYTES:
            raise FluxonFsBadRequestError(f"{name}: bad range offset={offset} length={length}")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise FluxonFsFileChangedError(f"{name}: the file is gone") from None
        try:
            st = os.fstat(fd)
            if not stat_mod.S_ISREG(st.st_mode):
                raise FluxonFsNotFoundError(f"{name}: not a regular file")
            if (st.st_size, st.st_mtime_ns) != (expected.size, expected.mtime_ns):
                raise FluxonFsFileChangedError(
                    f"{name}: the file changed (size {expected.size} -> {st.st_size}, "
                    f"mtime_ns {expected.mtime_ns} -> {st.st_mtime_ns})")
            if offset + length > st.st_size:
                raise FluxonFsBadRequestError(
                    f"{name}: range {offset}+{length} is past the end ({st.st_size} bytes)")
            data = os.pread(fd, length, offset)
        finally:
            os.close(fd)
        if len(data) != length:
            raise FluxonFsShortReadError(f"{name}: read {len(data)} of {length} bytes at {offset}")
        return data
