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
FluxonFS error naming export:relpath and the bucket. They are mapped by what
the store did (obstore's exception type, the HTTP status and the store's error
code, the transport failure's kind), never by words in its text
(StoreFailure below; docs/object-stores.md has the table).

A 0-byte key ending in ``/`` is a "folder" marker (the S3 console's "Create
folder"), not a file: listings leave it out. obstore drops the trailing
``/`` of a key, so a 0-byte entry is HEADed once to tell a marker (no key
without the ``/``) from a real empty object.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from fluxon_video.errors import (
    FluxonFsBadRequestError,
    FluxonFsConfigError,
    FluxonFsError,
    FluxonFsFileChangedError,
    FluxonFsIOError,
    FluxonFsNotFoundError,
    FluxonFsOverloadedError,
    FluxonFsPermissionError,
    FluxonFsShortReadError,
    FluxonFsTimeoutError,
)
from fluxon_video.fs.listing import MAX_PAGE, FluxonFsFileEntry, pattern_matcher
from fluxon_video.fs.origin import FileStat
from fluxon_video.fs.paths import check_relpath, name_of

# obstore's client options (the rest of an export's ``store`` table is the
# store's own config: endpoint, region, credentials ...).
CLIENT_OPTIONS = frozenset({"allow_http", "allow_invalid_certificates", "connect_timeout",
                            "pool_idle_timeout", "pool_max_idle_per_host", "proxy_url",
                            "root_certificate", "user_agent"})
# The longest a connection to the store may take to open, unless the store table
# sets connect_timeout (obstore's default too): an endpoint that drops SYNs costs
# at most this per try, store_retries + 1 tries; a refused one fails at once.
CONNECT_TIMEOUT_S = 5.0
# What a throttled store's error asks a caller to wait before trying again (the
# agent's Retry-After): the store's own retries already backed off.
THROTTLED_RETRY_AFTER_S = 2.0


class StoreExport(Protocol):
    """What an origin needs of an export (config.FluxonFsExport; not imported:
    the config checks store options through this module at start)."""

    name: str
    root: str
    store: Mapping[str, str | bool]
    store_timeout_s: float
    store_retries: int


def _obstore() -> Any:
    try:
        import obstore
    except ImportError:
        raise FluxonFsConfigError("an object-store export needs obstore (pip install obstore)") from None
    return obstore


# obstore's runtime does not survive a fork: a child forked after its parent
# made a store request hangs on its own first one, whatever store it builds
# (obstore is not fork-safe). The pid of the process that made the first request.
_requests_from: int | None = None


def _fork_check(name: str) -> None:
    """Before a request: refuse, rather than hang, in a process forked after its
    parent used a store (a DataLoader worker started with fork, say)."""
    global _requests_from
    pid = os.getpid()
    if _requests_from is None:
        _requests_from = pid
    elif _requests_from != pid:
        raise FluxonFsConfigError(
            f"{name}: this process was forked after its parent used an object store in-process, "
            "and obstore cannot work after such a fork (it would hang): start the workers with "
            "multiprocessing_context='spawn' or 'forkserver', or serve the export through an "
            "agent (agent_url), which trainers reach over HTTP from any process")


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

    def __init__(self, export: StoreExport) -> None:
        obstore = _obstore()
        self.export_name = export.name
        self._obstore = obstore
        self._plain_http = export.root.startswith(("http://", "https://"))
        self.container = container_of(export.root)
        self._timeout_s = export.store_timeout_s
        options = dict(export.store)
        client = {k: v for k, v in options.items() if k in CLIENT_OPTIONS}
        config = {k: v for k, v in options.items() if k not in CLIENT_OPTIONS}
        client["timeout"] = timedelta(seconds=export.store_timeout_s)
        client.setdefault("connect_timeout",
                          timedelta(seconds=min(CONNECT_TIMEOUT_S, export.store_timeout_s)))
        retry = {"max_retries": export.store_retries,
                 "retry_timeout": timedelta(seconds=3 * export.store_timeout_s),
                 "backoff": {"init_backoff": timedelta(milliseconds=50),
                             "max_backoff": timedelta(seconds=2), "base": 2}}
        try:
            self._store = obstore.store.from_url(export.root, config=config or None,
                                                 client_options=client, retry_config=retry)
        except Exception as exc:  # noqa: BLE001 - obstore's config errors have many types
            unknown = _UNKNOWN_KEY.search(str(exc))
            if unknown is not None:
                raise FluxonFsConfigError(
                    f"export {export.name!r}: store option {unknown[1]!r} is not one the "
                    f"{unknown[2]} store knows (a typo? the options are obstore's "
                    f"{unknown[2]}Config and ClientConfig; docs/object-stores.md)") from None
            raise FluxonFsConfigError(f"export {export.name!r}: cannot open its store "
                                      f"({type(exc).__name__}: {_first_line(exc)})") from None

    def probe(self) -> str:
        """Ask the store once whether the root is there: a listing of one page
        under it (a missing bucket answers that, where a HEAD answers 404 for a
        missing key and a missing bucket alike).

        Raises FluxonFsConfigError with the store's reason when its answer says
        the config is wrong and will stay so: the bucket does not exist, the
        credentials are refused, the request is malformed (a wrong region ...).
        Returns why the store did not answer as it should, when that may pass
        (unreachable, timing out, throttling, a 5xx; or a refusal to list, which
        an identity allowed s3:GetObject alone gets): "" when it answered.
        """
        _fork_check(self.export_name)
        try:
            next(iter(self._obstore.list(self._store, chunk_size=1)), None)
        except Exception as exc:  # noqa: BLE001 - mapped below
            mapped = self._refusal(exc, self.export_name, "list")
            reason = str(mapped).removeprefix(f"{self.export_name}: ")
            failure = StoreFailure.of(exc)
            if (isinstance(mapped, FluxonFsNotFoundError | FluxonFsBadRequestError)
                    or failure.code in BAD_CREDENTIAL_CODES or failure.status == 401
                    or isinstance(exc, self._obstore.exceptions.UnauthenticatedError)
                    or getattr(mapped, "lasting", False)):
                raise FluxonFsConfigError(reason) from None
            return reason
        return ""

    # ---- the Origin calls ----

    def stat(self, relpath: str, name: str) -> FileStat:
        _fork_check(name)
        try:
            meta = self._obstore.head(self._store, relpath)
        except Exception as exc:  # noqa: BLE001 - mapped below
            raise self._refusal(exc, name, "stat") from None
        return version_of(meta)

    def stat_head(self, relpath: str, name: str, length: int) -> tuple[FileStat, bytes]:
        # Two store requests (HEAD, then a GET bound to that version by If-Match):
        # the trainer still waits for one answer from the agent.
        version = self.stat(relpath, name)
        return version, self.read_range(relpath, name, 0, min(length, version.size), version)

    def read_range(self, relpath: str, name: str, offset: int, length: int,
                   expected: FileStat) -> bytes:
        if offset + length > expected.size:
            raise FluxonFsBadRequestError(
                f"{name}: range {offset}+{length} is past the end ({expected.size} bytes)")
        if length == 0:
            return b""
        _fork_check(name)
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
            refusal = self._refusal(exc, name, f"read {length} bytes at {offset}")
            if type(refusal) is FluxonFsNotFoundError and not is_store_fault(refusal):
                raise FluxonFsFileChangedError(f"{name}: the object is gone") from None
            raise refusal from None
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
        where = name_of(self.export_name, prefix)
        _fork_check(where)
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
            raise self._refusal(exc, where, "list") from None
        return out, None

    def _refusal(self, exc: BaseException, name: str, what: str) -> FluxonFsError:
        return refusal(exc, name, what, self.container, self._timeout_s)

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
        last = cursor
        for batch in self._obstore.list(self._store, prefix=directory, offset=cursor,
                                        chunk_size=1000):
            for meta in batch:
                path = meta["path"]
                # (a 0-byte object "a" and a marker "a/" both list as "a": once)
                if (path.startswith(start) and path != last
                        and not self._is_marker(meta, directory)):
                    last = path
                    yield FluxonFsFileEntry(path, int(meta["size"]), version_of(meta).mtime_ns)

    def _is_marker(self, meta: dict[str, Any], directory: str | None) -> bool:
        """Whether a listed object is a folder marker (a 0-byte key ending in "/",
        which obstore lists without its "/"): the listed directory's own (or the
        root's), or a key that a HEAD without the "/" does not find."""
        if int(meta["size"]) != 0:
            return False
        if meta["path"] in ("", directory):
            return True
        try:
            self._obstore.head(self._store, meta["path"])
        except (FileNotFoundError, self._obstore.exceptions.NotFoundError):
            return True
        return False

    def _one_level(self, prefix: str, cursor: str | None) -> Iterator[FluxonFsFileEntry]:
        """The objects and "directories" (common prefixes) right in scope, after cursor."""
        directory, start = self._scope(prefix)
        listed = self._obstore.list_with_delimiter(self._store, prefix=directory)
        entries = [FluxonFsFileEntry(p, 0, 0, is_dir=True) for p in listed["common_prefixes"]]
        # A marker of a subdirectory lists as a common prefix; only the listed
        # directory's own (or the root's) is among the objects.
        entries += [FluxonFsFileEntry(m["path"], int(m["size"]), version_of(m).mtime_ns)
                    for m in listed["objects"]
                    if not (int(m["size"]) == 0 and m["path"] in ("", directory))]
        for entry in sorted(entries, key=lambda e: e.relpath):
            if entry.relpath.startswith(start) and (cursor is None or entry.relpath > cursor):
                yield entry


def _first_line(exc: BaseException) -> str:
    """An obstore message without its debug dump, and without the URL it names."""
    line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return line.split(": Error performing")[0][:200]


def container_of(root: str) -> str:
    """What messages call the place an export's root names: "bucket 'name'" (S3,
    GCS), "container 'name'" (Azure), or "the HTTP origin" (its URL stays out)."""
    parts = urllib.parse.urlsplit(root)
    if parts.scheme in ("http", "https"):
        return "the HTTP origin"
    name = parts.netloc.partition("@")[0]  # abfs://container@account.dfs...
    kind = "container" if parts.scheme in ("az", "abfs", "abfss", "azure") else "bucket"
    return f"{kind} {name!r}"


# What obstore (as of 0.12, object_store 0.12) tells of a failure beyond its
# exception type, in its message: the first line says "Server returned non-2xx
# status code: 503 Service Unavailable: <the store's body>" for an HTTP answer,
# and the debug dump after it names a transport failure's kind ("HttpError {
# kind: Connect, ..."), the OS's reason and the retries made. Each pattern
# matches one of those fields only; tests/test_store_errors.py runs each case
# against a real S3 server, so a change of obstore's format fails there.
_STATUS = re.compile(r"\bServer returned non-2xx status code: ([1-5]\d\d)\b")
_DEBUG_STATUS = re.compile(r"\binner: Status \{\s*status: ([1-5]\d\d),")
_ERROR_CODE = re.compile(r"<Code>([A-Za-z][A-Za-z0-9.]{0,63})</Code>")
_HTTP_KIND = re.compile(r"\bHttpError \{\s*kind: ([A-Za-z]{1,32}),")
_OS_REASON = re.compile(r'\bOs \{\s*code: \d+,\s*kind: \w+,\s*message: "([^"\n]{1,120})"')
_CONNECT_STEP = re.compile(r'\bConnectError\(\s*"([a-z ]{1,40})"')
_RETRIES = re.compile(r"\bretries: (\d+),")
_UNKNOWN_KEY = re.compile(r"key: '([^'\n]{1,100})' is not valid for store '(\w{1,20})'")

# The store's error codes for a bucket (container) that does not exist, and for
# throttling (S3 and compatibles, GCS's XML API, Azure).
MISSING_CONTAINER_CODES = frozenset({"NoSuchBucket", "ContainerNotFound"})
THROTTLING_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException",
                              "RequestLimitExceeded", "TooManyRequests",
                              "RequestThrottled", "ServerBusy"})
# The store's error codes that say its credentials are wrong (S3 answers these 403).
BAD_CREDENTIAL_CODES = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch",
                                  "InvalidToken", "ExpiredToken", "InvalidSecurity",
                                  "AuthenticationFailed"})


@dataclass(frozen=True)
class StoreFailure:
    """What a failed store call says: the HTTP status and error code of the
    store's answer, or the kind of transport failure (Connect, Timeout, Request
    ...) and the OS's reason; the retries obstore made."""

    status: int | None
    code: str
    transport: str | None
    reason: str
    retries: int

    @classmethod
    def of(cls, exc: BaseException) -> StoreFailure:
        text = str(exc)
        status = _STATUS.search(text) or _DEBUG_STATUS.search(text)
        code = _ERROR_CODE.search(text)
        transport = _HTTP_KIND.search(text)
        reason = _OS_REASON.search(text) or _CONNECT_STEP.search(text)
        retries = _RETRIES.search(text)
        return cls(int(status[1]) if status else None, code[1] if code else "",
                   transport[1] if transport else None,
                   reason[1].lower() if reason else "", int(retries[1]) if retries else 0)

    @property
    def answer(self) -> str:
        """The store's answer, as "503 SlowDown"."""
        return f"{self.status} {self.code}".strip()

    @property
    def after(self) -> str:
        return f", after {self.retries} retr{'y' if self.retries == 1 else 'ies'}" if self.retries else ""


def is_store_fault(exc: BaseException) -> bool:
    """Whether an error is about the store as a whole (its bucket missing, its
    access refused, unreachable, throttling, failing) rather than one object: the
    agent logs those (one line, rate-limited)."""
    return bool(getattr(exc, "store_fault", False))


def _store_fault(exc: FluxonFsError, lasting: bool = False) -> FluxonFsError:
    exc.store_fault = True  # type: ignore[attr-defined]
    if lasting:
        # The store answered: waiting will not change it (the agent answers 500,
        # which a client does not wait out; see fs/routes.py).
        exc.lasting = True  # type: ignore[attr-defined]
    return exc


def _connect_reason(failure: StoreFailure) -> str:
    if failure.reason == "dns error":
        return "its host name does not resolve"
    return failure.reason or "no connection"


def refusal(exc: BaseException, name: str, what: str, container: str,
            timeout_s: float) -> FluxonFsError:
    """The FluxonFS error for an obstore failure on name (never the store's URL).

    By type first (obstore's NotFound, PermissionDenied, Unauthenticated,
    Precondition, NotSupported), then by the store's HTTP status and error code,
    then by the transport failure's kind; see docs/object-stores.md#errors.
    """
    errors_ = _obstore().exceptions
    failure = StoreFailure.of(exc)
    status, code = failure.status, failure.code
    if code in MISSING_CONTAINER_CODES:
        return _store_fault(FluxonFsNotFoundError(
            f"{name}: {container} does not exist (the store answered {failure.answer})"))
    if isinstance(exc, FileNotFoundError | errors_.NotFoundError) or status == 404:
        return FluxonFsNotFoundError(f"{name}: no such object in {container}")
    if (isinstance(exc, errors_.UnauthenticatedError) or status == 401
            or code in BAD_CREDENTIAL_CODES):
        return _store_fault(FluxonFsPermissionError(
            f"{name}: the store refused access to {container}: it does not accept the "
            f"credentials ({failure.answer or 'unauthenticated'})"))
    if isinstance(exc, PermissionError | errors_.PermissionDeniedError) or status == 403:
        return _store_fault(FluxonFsPermissionError(
            f"{name}: the store refused access to {container} ({failure.answer or 'denied'})"))
    if isinstance(exc, errors_.PreconditionError) or status == 412:
        return FluxonFsFileChangedError(f"{name}: the object changed")
    if isinstance(exc, errors_.NotSupportedError):
        return FluxonFsBadRequestError(f"{name}: the store cannot {what}")
    if status in (429, 503) or code in THROTTLING_CODES:
        overloaded = FluxonFsOverloadedError(
            f"{name}: the store is throttling requests to {container} ({failure.answer}"
            f"{failure.after}); try again later")
        overloaded.retry_after_s = THROTTLED_RETRY_AFTER_S
        return _store_fault(overloaded)
    if status is not None and status < 500:
        return _store_fault(FluxonFsIOError(
            f"{name}: the store refused the request ({what}) for {container}: "
            f"{failure.answer}"), lasting=True)
    if status is not None:
        return _store_fault(FluxonFsIOError(
            f"{name}: the store failed to answer ({what}) for {container}: "
            f"{failure.answer}{failure.after}"))
    if failure.transport == "Timeout" or isinstance(exc, TimeoutError):
        return _store_fault(FluxonFsTimeoutError(
            f"{name}: the store did not answer ({what}) for {container} within "
            f"store_timeout_s = {timeout_s:g} s{failure.after}"))
    if failure.transport == "Connect":
        return _store_fault(FluxonFsIOError(
            f"{name}: cannot reach the store for {container} ({_connect_reason(failure)}"
            f"{failure.after})"))
    if failure.transport is not None:  # Request, Interrupted, Decode, Unknown
        return _store_fault(FluxonFsIOError(
            f"{name}: the connection to the store for {container} failed "
            f"({failure.transport.lower()} error{failure.after})"))
    return _store_fault(FluxonFsIOError(
        f"{name}: the store failed to answer ({what}) for {container} ({type(exc).__name__})"))
