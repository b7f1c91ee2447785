"""The second origin: a bucket (or prefix) of an object store, through obstore.

obstore binds the Rust ``object_store`` crate: one API for S3 and its
compatibles, GCS, Azure Blob and plain HTTP, with ranged GETs, retries with
backoff and connection pooling, and the GIL released while it waits. It was
chosen over fsspec/s3fs for that: s3fs reads through a Python file object
with its own block cache and aiobotocore underneath (more bytes and more
Python per request), and each of gcsfs and adlfs is a separate library with
its own errors and options.

A version is the object's size, last-modified time (as ``mtime_ns``) and
ETag (with the version id on a versioned bucket). A read names the ETag in
``If-Match``, so a piece is never read from a newer object than the one the
reader opened: the store answers 412 and the read fails as a changed file.
Keys are ``<root prefix>/<relpath>``; a listing goes through the store's
own pages in key order, with ``/`` as the directory separator.

Errors never carry the store's URLs or credentials: each becomes a clean
FluxonFS error naming export:relpath.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from fluxon_video.errors import (
    FluxonFsBadRequestError,
    FluxonFsConfigError,
    FluxonFsError,
    FluxonFsFileChangedError,
    FluxonFsIOError,
    FluxonFsNotFoundError,
    FluxonFsPermissionError,
    FluxonFsShortReadError,
    FluxonFsTimeoutError,
)
from fluxon_video.fs.config import FluxonFsExport
from fluxon_video.fs.listing import MAX_PAGE, FluxonFsFileEntry, pattern_matcher
from fluxon_video.fs.origin import FileStat
from fluxon_video.fs.paths import check_relpath

# obstore's client options (the rest of an export's ``store`` table is the
# store's own config: endpoint, region, credentials ...).
CLIENT_OPTIONS = frozenset({"allow_http", "allow_invalid_certificates", "connect_timeout",
                            "pool_idle_timeout", "pool_max_idle_per_host", "proxy_url",
                            "root_certificate", "user_agent"})


def _obstore() -> Any:
    try:
        import obstore
    except ImportError:
        raise FluxonFsConfigError("an object-store export needs obstore (pip install obstore)") from None
    return obstore


def version_of(meta: dict[str, Any]) -> FileStat:
    """The FileStat of an object's metadata (obstore's ObjectMeta)."""
    modified = meta["last_modified"]
    mtime_ns = int(modified.timestamp()) * 1_000_000_000 + modified.microsecond * 1000
    etag = meta.get("e_tag") or ""
    if meta.get("version"):
        etag = f"{etag}#{meta['version']}"
    return FileStat(int(meta["size"]), mtime_ns, etag=etag)


class ObjectStoreOrigin:
    """The objects under one URL prefix."""

    def __init__(self, export: FluxonFsExport) -> None:
        obstore = _obstore()
        self.export_name = export.name
        self._obstore = obstore
        self._plain_http = export.root.startswith(("http://", "https://"))
        options = dict(export.store)
        client = {k: v for k, v in options.items() if k in CLIENT_OPTIONS}
        config = {k: v for k, v in options.items() if k not in CLIENT_OPTIONS}
        client["timeout"] = timedelta(seconds=export.store_timeout_s)
        retry = {"max_retries": export.store_retries,
                 "retry_timeout": timedelta(seconds=3 * export.store_timeout_s),
                 "backoff": {"init_backoff": timedelta(milliseconds=50),
                             "max_backoff": timedelta(seconds=2), "base": 2}}
        try:
            self._store = obstore.store.from_url(export.root, config=config or None,
                                                 client_options=client, retry_config=retry)
        except Exception as exc:  # noqa: BLE001 - obstore's config errors have many types
            raise FluxonFsConfigError(f"export {export.name!r}: cannot open its store "
                                      f"({type(exc).__name__}: {_first_line(exc)})") from None

    # ---- the Origin calls ----

    def stat(self, relpath: str, name: str) -> FileStat:
        try:
            meta = self._obstore.head(self._store, relpath)
        except Exception as exc:  # noqa: BLE001 - mapped below
            raise _refusal(exc, name, "stat") from None
        return version_of(meta)

    def read_range(self, relpath: str, name: str, offset: int, length: int,
                   expected: FileStat) -> bytes:
        if offset + length > expected.size:
            raise FluxonFsBadRequestError(
                f"{name}: range {offset}+{length} is past the end ({expected.size} bytes)")
        if length == 0:
            return b""
        etag, _, version = expected.etag.partition("#")
        options: dict[str, Any] = {"range": (offset, offset + length)}
        if etag:
            options["if_match"] = etag
        if version:
            options["version"] = version
        try:
            result = self._obstore.get(self._store, relpath, options=options)
            data = bytes(result.bytes())
        except Exception as exc:  # noqa: BLE001 - mapped below
            if isinstance(exc, FileNotFoundError | self._obstore.exceptions.NotFoundError):
                raise FluxonFsFileChangedError(f"{name}: the object is gone") from None
            raise _refusal(exc, name, f"read {length} bytes at {offset}") from None
        current = version_of(result.meta)
        if current != expected:  # a store without If-Match support still cannot mix them
            raise FluxonFsFileChangedError(
                f"{name}: the object changed ({expected.describe_change(current)})")
        if len(data) != length:
            raise FluxonFsShortReadError(f"{name}: read {len(data)} of {length} bytes at {offset}")
        return data

    def list_page(self, prefix: str, recursive: bool, pattern: str | None, cursor: str | None,
                  limit: int) -> tuple[list[FluxonFsFileEntry], str | None]:
        if not 0 < limit <= MAX_PAGE:
            raise FluxonFsBadRequestError(
                f"{self.export_name}: limit must be 1..{MAX_PAGE}, got {limit}")
        prefix = "" if prefix.strip("/") in ("", ".") else check_relpath(prefix)
        cursor = check_relpath(cursor) if cursor else None
        where = f"{self.export_name}:{prefix}"
        match = pattern_matcher(pattern, where) if pattern else None  # length-capped, cached
        try:
            entries = (self._walk(prefix, cursor) if recursive
                       else self._one_level(prefix, cursor))
            out: list[FluxonFsFileEntry] = []
            for entry in entries:
                if match is not None and match(entry.relpath) is None:
                    continue
                out.append(entry)
                if len(out) == limit:
                    return out, entry.relpath
        except FluxonFsError:
            raise
        except Exception as exc:  # noqa: BLE001 - mapped below
            if self._plain_http:
                raise FluxonFsBadRequestError(
                    f"{where}: this HTTP origin cannot list its files (plain HTTP has no "
                    "listing; name files by relpath)") from None
            raise _refusal(exc, where, "list") from None
        return out, None

    # ---- listing ----

    def _scope(self, prefix: str) -> tuple[str | None, str]:
        """(the directory to list, the start its entries' relpaths must have).

        As for a directory export: a prefix naming a "directory" (keys exist
        under prefix/) lists it, any other prefix lists the names that start
        with it ("videos/cam1_")."""
        if not prefix:
            return None, ""
        directory = prefix.rstrip("/")
        if prefix.endswith("/") or next(iter(self._obstore.list(
                self._store, prefix=directory, chunk_size=1)), []):
            return directory, directory + "/"
        parent = directory.rpartition("/")[0]
        return parent or None, prefix

    def _walk(self, prefix: str, cursor: str | None) -> Iterator[FluxonFsFileEntry]:
        """Every object in scope after cursor, in key order, a store page at a time."""
        directory, start = self._scope(prefix)
        for batch in self._obstore.list(self._store, prefix=directory, offset=cursor,
                                        chunk_size=1000):
            for meta in batch:
                if meta["path"].startswith(start):
                    yield FluxonFsFileEntry(meta["path"], int(meta["size"]),
                                            version_of(meta).mtime_ns)

    def _one_level(self, prefix: str, cursor: str | None) -> Iterator[FluxonFsFileEntry]:
        """The objects and "directories" (common prefixes) right in scope, after cursor."""
        directory, start = self._scope(prefix)
        listed = self._obstore.list_with_delimiter(self._store, prefix=directory)
        entries = [FluxonFsFileEntry(p, 0, 0, is_dir=True) for p in listed["common_prefixes"]]
        entries += [FluxonFsFileEntry(m["path"], int(m["size"]), version_of(m).mtime_ns)
                    for m in listed["objects"]]
        for entry in sorted(entries, key=lambda e: e.relpath):
            if entry.relpath.startswith(start) and (cursor is None or entry.relpath > cursor):
                yield entry


def _first_line(exc: BaseException) -> str:
    """An obstore message without its debug dump, and without the URL it names."""
    line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return line.split(": Error performing")[0][:200]


def _refusal(exc: BaseException, name: str, what: str) -> FluxonFsError:
    """The FluxonFS error for an obstore failure on name: never the store's URL."""
    errors_ = _obstore().exceptions
    if isinstance(exc, FileNotFoundError | errors_.NotFoundError):
        return FluxonFsNotFoundError(f"{name}: no such object")
    if isinstance(exc, PermissionError | errors_.PermissionDeniedError
                  | errors_.UnauthenticatedError):
        return FluxonFsPermissionError(f"{name}: the store refused access")
    if isinstance(exc, errors_.PreconditionError):
        return FluxonFsFileChangedError(f"{name}: the object changed")
    if isinstance(exc, errors_.NotSupportedError):
        return FluxonFsBadRequestError(f"{name}: the store cannot {what}")
    text = str(exc).lower()
    if isinstance(exc, TimeoutError) or "timed out" in text or "timeout" in text:
        return FluxonFsTimeoutError(f"{name}: the store did not answer ({what}) in time, "
                                    "after retries")
    return FluxonFsIOError(f"{name}: the store failed to {what} after retries "
                           f"({type(exc).__name__})")
