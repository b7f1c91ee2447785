"""The storage side of FluxonFS: access checks in front of each export's origin.

The agent server serves these over HTTP; an export without an agent_url is
served by the same object in-process, so both routes apply the same checks:
the bearer token must name an identity on the export's access list, the
relpath must be a plain path inside the root (no '..', no absolute paths, no
NUL bytes), and a range must be one the protocol allows. What is behind an
export (fs/origin.py) never sees a request that failed them.

The token is checked before the export is looked up: a caller without a
valid token learns nothing of which exports exist (401 whatever it asks), and
an unknown export's 404 names only the exports the caller may read.
"""

from __future__ import annotations

from fluxon_video.errors import (FluxonFsAuthenticationError, FluxonFsBadRequestError,
                                  FluxonFsNotFoundError, FluxonFsPermissionError)
from fluxon_video.fs.config import FluxonFsConfig, FluxonFsExport
from fluxon_video.fs.listing import FluxonFsFileEntry
from fluxon_video.fs.origin import FileStat, Origin
from fluxon_video.fs.paths import check_relpath
from fluxon_video.fs.posix_origin import PosixOrigin
from fluxon_video.fs.tokens import TokenTable

MAX_CHUNK_BYTES = 64 << 20


def open_origin(export: FluxonFsExport) -> Origin:
    """The backend that holds an export's files: a bucket, or a directory."""
    if export.is_object_store:
        from fluxon_video.fs.object_origin import ObjectStoreOrigin  # obstore: only when used

        return ObjectStoreOrigin(export)
    return PosixOrigin(export.name, export.root)


class ExportStorage:
    """Serves stat, read_chunk and list for the exports of a config, with access checks."""

    def __init__(self, config: FluxonFsConfig) -> None:
        self.config = config
        self._tokens = TokenTable(config.identities)
        self._origins: dict[str, Origin] = {}

    def authorize(self, export_name: str, token: str | None) -> tuple[FluxonFsExport, str]:
        """The export and the caller's identity name, or a permission/not-found error."""
        identity = self._tokens.identify(token)
        if identity is None:
            raise FluxonFsAuthenticationError(f"{export_name}: unknown or missing bearer token")
        export = self.config.exports.get(export_name)
        if export is None:
            # Not config.export(), whose message lists every export: name only those
            # this identity may read, which it could learn by trying them anyway.
            readable = sorted(e.name for e in self.config.exports.values() if identity in e.allow)
            raise FluxonFsNotFoundError(f"unknown export {export_name!r} (identity {identity!r} "
                                        f"may read: {', '.join(readable) or 'none'})")
        if identity not in export.allow:
            raise FluxonFsPermissionError(
                f"{export_name}: identity {identity!r} is not allowed to read this export")
        return export, identity

    def _origin(self, export: FluxonFsExport) -> Origin:
        origin = self._origins.get(export.name)
        if origin is None:
            origin = self._origins[export.name] = open_origin(export)
        return origin

    def stat(self, export_name: str, relpath: str, token: str | None) -> FileStat:
        export, _ = self.authorize(export_name, token)
        relpath = check_relpath(relpath)
        return self._origin(export).stat(relpath, f"{export_name}:{relpath}")

    def list(self, export_name: str, prefix: str, recursive: bool, pattern: str | None,
             cursor: str | None, limit: int, token: str | None
             ) -> tuple[list[FluxonFsFileEntry], str | None]:
        """One page of the export's files under prefix (see fs/listing.py)."""
        export, _ = self.authorize(export_name, token)
        return self._origin(export).list_page(prefix, recursive, pattern, cursor, limit)

    def read_chunk(self, export_name: str, relpath: str, offset: int, length: int,
                   expected: FileStat, token: str | None) -> bytes:
        export, _ = self.authorize(export_name, token)
        relpath = check_relpath(relpath)
        name = f"{export_name}:{relpath}"
        if offset < 0 or length < 0 or length > MAX_CHUNK_BYTES:
            raise FluxonFsBadRequestError(f"{name}: bad range offset={offset} length={length}")
        return self._origin(export).read_range(relpath, name, offset, length, expected)
