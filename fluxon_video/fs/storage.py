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

An object-store export's options are checked where a served export's root is
(FluxonFsConfig.check_served: at the agent's start and reload, and when a
patcher serves it in-process); the agent also asks each store once at start
whether its bucket is there (``probe_stores``).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterable
from dataclasses import dataclass

from fluxon_video.errors import (FluxonFsAuthenticationError, FluxonFsBadRequestError,
                                  FluxonFsConfigError, FluxonFsNotFoundError,
                                  FluxonFsPermissionError)
from fluxon_video.fs.config import FluxonFsConfig, FluxonFsExport
from fluxon_video.fs.listing import FluxonFsFileEntry
from fluxon_video.fs.origin import FileStat, Origin
from fluxon_video.fs.paths import check_relpath, name_of
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

    def open_stores(self, exports: Iterable[FluxonFsExport]) -> None:
        """Open the store of each object-store export now: a store option obstore
        does not know (a typo) is a FluxonFsConfigError naming the file and export."""
        for export in exports:
            if export.is_object_store and export.name not in self._origins:
                try:
                    self._origin(export)
                except FluxonFsConfigError as exc:
                    reason = str(exc).removeprefix(f"export {export.name!r}: ")
                    raise FluxonFsConfigError(f"{self._key(export)}: {reason}") from None

    def probe_stores(self, exports: Iterable[FluxonFsExport]) -> list[StoreProbe]:
        """Ask each object-store export's store once, all at once, whether its root
        is there (fs/object_origin.py ObjectStoreOrigin.probe): a listing of one
        page, with the export's own timeout and retries.

        What the store answered that only a config change can fix (the bucket
        does not exist, the credentials are refused, a request refused as
        malformed) is raised as a FluxonFsConfigError naming the file, the export
        and the store's reason. What may pass (the store unreachable, timing out,
        throttling, failing with a 5xx; or refusing to list, which an identity
        allowed only s3:GetObject gets) is returned as a StoreProbe with the
        reason, for the caller to warn about: the export is served anyway.
        """
        probed = [e for e in exports if e.is_object_store
                  and not e.root.startswith(("http://", "https://"))]  # plain HTTP: no listing
        self.open_stores(probed)
        if not probed:
            return []
        with concurrent.futures.ThreadPoolExecutor(min(8, len(probed)),
                                                   thread_name_prefix="probe") as pool:
            found = list(pool.map(self._probe, probed))
        refused = [p for p in found if p.refused]
        if refused:
            raise FluxonFsConfigError("; ".join(f"{self._key(p.export)}: the store refused "
                                                f"at start: {p.reason}" for p in refused))
        return [p for p in found if p.reason]

    def _probe(self, export: FluxonFsExport) -> StoreProbe:
        try:
            reason = self._origins[export.name].probe()  # type: ignore[attr-defined]
        except FluxonFsConfigError as exc:
            return StoreProbe(export, str(exc), refused=True)
        return StoreProbe(export, reason)

    def _key(self, export: FluxonFsExport) -> str:
        """How messages name an export's table: "FILE: exports[i] (name)"."""
        where = f"{self.config.source}: " if self.config.source else ""
        names = list(self.config.exports)
        index = names.index(export.name) if export.name in names else "?"
        return f"{where}exports[{index}] ({export.name})"

    def authorize(self, export_name: str, token: str | None,
                  name: str | None = None) -> tuple[FluxonFsExport, str]:
        """The export and the caller's identity name, or a permission/not-found error
        (whose message starts with ``name``: the file asked for, else the export)."""
        identity = self._tokens.identify(token)
        if identity is None:
            raise FluxonFsAuthenticationError(
                f"{name or export_name}: "
                + ("no bearer token" if not token else "no identity has this bearer token"))
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
        export, _ = self.authorize(export_name, token, _asked(export_name, relpath))
        relpath = check_relpath(relpath)
        return self._origin(export).stat(relpath, name_of(export_name, relpath))

    def stat_head(self, export_name: str, relpath: str, length: int,
                  token: str | None) -> tuple[FileStat, bytes]:
        """stat, and the version's first ``length`` bytes (fewer in a shorter file)."""
        export, _ = self.authorize(export_name, token, _asked(export_name, relpath))
        relpath = check_relpath(relpath)
        name = name_of(export_name, relpath)
        if not 0 < length <= MAX_CHUNK_BYTES:
            raise FluxonFsBadRequestError(f"{name}: bad head length {length}")
        return self._origin(export).stat_head(relpath, name, length)

    def list(self, export_name: str, prefix: str, recursive: bool, pattern: str | None,
             cursor: str | None, limit: int, token: str | None
             ) -> tuple[list[FluxonFsFileEntry], str | None]:
        """One page of the export's files under prefix (see fs/listing.py)."""
        export, _ = self.authorize(export_name, token, _asked(export_name, prefix))
        return self._origin(export).list_page(prefix, recursive, pattern, cursor, limit)

    def read_chunk(self, export_name: str, relpath: str, offset: int, length: int,
                   expected: FileStat, token: str | None) -> bytes:
        export, _ = self.authorize(export_name, token, _asked(export_name, relpath))
        relpath = check_relpath(relpath)
        name = name_of(export_name, relpath)
        if offset < 0 or length < 0 or length > MAX_CHUNK_BYTES:
            raise FluxonFsBadRequestError(f"{name}: bad range offset={offset} length={length}")
        return self._origin(export).read_range(relpath, name, offset, length, expected)


@dataclass(frozen=True)
class StoreProbe:
    """An export whose store did not answer its start-up probe as it should:
    why (the mapped error's message), and whether that refuses the start."""

    export: FluxonFsExport
    reason: str
    refused: bool = False


def _asked(export_name: str, relpath: object) -> str:
    """The file a request names, as the client names it in its messages (before
    the relpath is checked: a refusal of the token comes first)."""
    return name_of(export_name, relpath if isinstance(relpath, str) else "")
