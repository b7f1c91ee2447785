"""How the client reaches an export's storage: an agent over HTTP, or in-process.

Both routes answer the same two calls with the same exceptions, so the
client above them has one read path.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Protocol
from urllib.parse import urlencode

import urllib3

from fluxon_video import errors
from fluxon_video.fs.listing import FluxonFsFileEntry
from fluxon_video.fs.origin import FileStat
from fluxon_video.fs.storage import ExportStorage
from fluxon_video.logs import get_logger

log = get_logger("routes")

_ERROR_KINDS: dict[str, type[errors.FluxonFsError]] = {
    "bad_request": errors.FluxonFsBadRequestError,
    "permission": errors.FluxonFsPermissionError,
    "not_found": errors.FluxonFsNotFoundError,
    "changed": errors.FluxonFsFileChangedError,
    # Too many failed authentications from this address: the token is what to fix,
    # and another replica would refuse it too.
    "throttled": errors.FluxonFsPermissionError,
    "unavailable": errors.FluxonFsOverloadedError,
}
_STATUS_ERRORS: dict[int, type[errors.FluxonFsError]] = {
    400: errors.FluxonFsBadRequestError,
    401: errors.FluxonFsAuthenticationError,
    403: errors.FluxonFsPermissionError,
    404: errors.FluxonFsNotFoundError,
    409: errors.FluxonFsFileChangedError,
    429: errors.FluxonFsPermissionError,
    503: errors.FluxonFsOverloadedError,
}
# The most of an agent's answer the client reads before giving up on it, so a
# misbehaving agent cannot make a trainer buffer without bound: a read's answer
# is exactly its length; a stat's or an error's is a few hundred bytes of JSON;
# a list page of 10,000 entries with long relpaths stays well under 16 MiB.
SMALL_ANSWER_BYTES = 64 << 10
LIST_ANSWER_BYTES = 16 << 20


class Route(Protocol):
    def stat(self, export: str, relpath: str, token: str) -> FileStat: ...

    def list(self, export: str, prefix: str, recursive: bool, pattern: str | None,
             cursor: str | None, limit: int, token: str) -> tuple[list[FluxonFsFileEntry], str | None]: ...

    def read_chunk(self, export: str, relpath: str, offset: int, length: int,
                   expected: FileStat, token: str) -> bytes: ...

    def close(self) -> None: ...


class InProcessRoute:
    """The export served by this process, through the agent's own checks."""

    def __init__(self, storage: ExportStorage) -> None:
        self.storage = storage

    def stat(self, export: str, relpath: str, token: str) -> FileStat:
        return self.storage.stat(export, relpath, token)

    def list(self, export: str, prefix: str, recursive: bool, pattern: str | None,
             cursor: str | None, limit: int, token: str) -> tuple[list[FluxonFsFileEntry], str | None]:
        return self.storage.list(export, prefix, recursive, pattern, cursor, limit, token)

    def read_chunk(self, export: str, relpath: str, offset: int, length: int,
                   expected: FileStat, token: str) -> bytes:
        return self.storage.read_chunk(export, relpath, offset, length, expected, token)

    def close(self) -> None:
        pass


class AgentRoute:
    """HTTP/1.1 keep-alive connections to one agent (urllib3's thread-safe pool).

    An ``https://`` URL is verified against ``ca_bundle`` (a PEM file of CA
    certificates) when given, else against the system's trust store; the
    certificate must name the URL's host.
    """

    def __init__(self, url: str, timeout_s: float, connect_timeout_s: float, pool_size: int,
                 ca_bundle: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.ca_bundle = ca_bundle
        if ca_bundle is not None and self.url.startswith("https://") and not os.path.isfile(ca_bundle):
            raise errors.FluxonFsConfigError(
                f"client.agent_ca_bundle {ca_bundle!r} is not a file (needed for {self.url})")
        self._timeout = urllib3.Timeout(connect=connect_timeout_s, read=timeout_s)
        # One retry covers a keep-alive connection the agent closed meanwhile.
        self._retries = urllib3.Retry(total=1, connect=1, read=0, status=0, redirect=0,
                                      backoff_factor=0.05, raise_on_status=False)
        self._pool_size = pool_size
        self._lock = threading.Lock()
        self._http: urllib3.PoolManager | None = None
        self._pid = -1

    def _pool(self) -> urllib3.PoolManager:
        # A pool made before fork shares sockets with the parent: make our own.
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    # (the TLS options apply to https:// only)
                    self._http = urllib3.PoolManager(num_pools=4, maxsize=self._pool_size,
                                                     block=False, timeout=self._timeout,
                                                     retries=self._retries,
                                                     cert_reqs="CERT_REQUIRED",
                                                     ca_certs=self.ca_bundle)
                    self._pid = os.getpid()
        assert self._http is not None
        return self._http

    def _get(self, path: str, params: dict[str, object], token: str, what: str) -> bytes:
        """The body of the agent's 200 answer, read as it streams in, up to its
        limit (_answer_limit); any other answer is raised as its error."""
        limit = _answer_limit(path, params)
        url = f"{self.url}{path}?{urlencode(params)}"
        try:
            response = self._pool().request("GET", url, headers={"Authorization": f"Bearer {token}"},
                                            preload_content=False)
        except urllib3.exceptions.HTTPError as exc:
            raise self._transport_error(exc, what) from None
        try:
            if response.status != 200:
                raise self._answer_error(response, what)
            return self._read(response, limit, what)
        finally:
            if response.connection is not None:
                # Not read to its end (an error, an answer past its limit): the rest
                # must not be taken for the next answer on this connection.
                response.close()
                response.release_conn()

    def _read(self, response: urllib3.BaseHTTPResponse, limit: int, what: str) -> bytes:
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > limit:
            raise errors.FluxonFsIOError(f"{what}: agent {self.url} sent a {declared}-byte "
                                         f"answer where at most {limit} were expected")
        try:
            data = response.read(limit + 1)  # one byte past the limit tells a longer body
        except urllib3.exceptions.HTTPError as exc:
            raise self._transport_error(exc, what) from None
        if len(data) > limit:
            raise errors.FluxonFsIOError(f"{what}: agent {self.url} sent an answer longer than "
                                         f"the {limit} bytes expected")
        return data

    def _transport_error(self, exc: urllib3.exceptions.HTTPError,
                         what: str) -> errors.FluxonFsIOError:
        """No answer from the agent: unreachable, timed out, TLS failed, cut off."""
        # With retries, urllib3 wraps the cause in MaxRetryError.
        cause = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
        # (a refused connection is a NewConnectionError, which urllib3 2 derives
        # from ConnectTimeoutError: it is no timeout)
        if (isinstance(cause, urllib3.exceptions.TimeoutError)
                and not isinstance(cause, urllib3.exceptions.NewConnectionError)):
            return errors.FluxonFsTimeoutError(f"{what}: agent {self.url} timed out ({cause})")
        if isinstance(cause, urllib3.exceptions.SSLError):
            # A failed handshake: the certificate did not verify against the CA
            # bundle or name this host, or the agent does not speak TLS.
            return errors.FluxonFsIOError(
                f"{what}: TLS connection to agent {self.url} failed ({cause}); "
                + ("check that client.agent_ca_bundle is the CA that signed the agent's "
                   "certificate and that the certificate names this host"
                   if self.ca_bundle else "a self-signed agent certificate needs "
                   "client.agent_ca_bundle (the CA's PEM file)"))
        if (self.url.startswith("http://")
                and isinstance(cause, urllib3.exceptions.ProtocolError)):
            # What plain HTTP gets from a TLS listener: a closed connection.
            return errors.FluxonFsIOError(
                f"{what}: agent {self.url} closed the connection without answering; if it "
                "serves HTTPS (--tls-cert), use an https:// agent_url")
        return errors.FluxonFsIOError(f"{what}: agent {self.url} unreachable ({exc})")

    def _answer_error(self, response: urllib3.BaseHTTPResponse, what: str) -> errors.FluxonFsError:
        """The error an answer other than 200 stands for (its JSON kind, else its status)."""
        try:
            raw = response.read(SMALL_ANSWER_BYTES)  # a longer one is cut: the status tells
        except urllib3.exceptions.HTTPError:
            raw = b""
        try:
            body = json.loads(raw)
            cls = _ERROR_KINDS.get(body.get("error"), None)
            message = body.get("message", "")
        except (ValueError, AttributeError):
            cls, message = None, raw[:200].decode("utf-8", "replace")
        message = message.removeprefix(f"{what}: ")  # the agent names the file too
        cls = cls or _STATUS_ERRORS.get(response.status, errors.FluxonFsIOError)
        if response.status == 401:  # the kind says "permission"; the status says which
            cls = errors.FluxonFsAuthenticationError
        retry_after = _retry_after(response)
        if response.status in (429, 503):  # about the agent, not the file: name it
            message = f"agent {self.url}: {message}"
            if retry_after is not None:
                message += f"; it asks to retry after {retry_after:g} s"
        exc = cls(f"{what}: {message} (the agent answered {response.status})")
        if isinstance(exc, errors.FluxonFsOverloadedError):
            exc.retry_after_s = retry_after
        return exc

    def stat(self, export: str, relpath: str, token: str) -> FileStat:
        body = self._get("/v1/stat", {"export": export, "path": relpath}, token,
                         f"{export}:{relpath}")
        try:
            return FileStat.from_fields(json.loads(body))
        except (ValueError, KeyError, TypeError) as exc:
            raise errors.FluxonFsIOError(f"{export}:{relpath}: agent {self.url} sent a stat "
                                         f"this client cannot read ({exc})") from None

    def list(self, export: str, prefix: str, recursive: bool, pattern: str | None,
             cursor: str | None, limit: int, token: str) -> tuple[list[FluxonFsFileEntry], str | None]:
        params: dict[str, object] = {"export": export, "prefix": prefix,
                                     "recursive": int(recursive), "limit": limit}
        if pattern:
            params["pattern"] = pattern
        if cursor:
            params["cursor"] = cursor
        what = f"{export}:{prefix}"
        body = self._get("/v1/list", params, token, what)
        try:
            page = json.loads(body)
            return [FluxonFsFileEntry(**e) for e in page["entries"]], page["next"]
        except (ValueError, KeyError, TypeError) as exc:
            raise errors.FluxonFsIOError(f"{what}: agent {self.url} sent a list page this "
                                         f"client cannot read ({exc})") from None

    def read_chunk(self, export: str, relpath: str, offset: int, length: int,
                   expected: FileStat, token: str) -> bytes:
        data = self._get("/v1/read", {"export": export, "path": relpath, "offset": offset,
                                      "length": length, **expected.as_fields()},
                         token, f"{export}:{relpath}")
        if len(data) != length:
            raise errors.FluxonFsShortReadError(
                f"{export}:{relpath}: agent returned {len(data)} of {length} bytes at {offset}")
        return data

    def close(self) -> None:
        with self._lock:
            if self._http is not None and self._pid == os.getpid():
                self._http.clear()
            self._http = None
            self._pid = -1


class ReplicatedRoute:
    """Agents serving the same storage: fail over, and skip a dead one for a while.

    stat and read_chunk are idempotent, so a call that finds a replica
    unreachable or timing out is retried on the next one. An answer (file not
    found, permission, changed) is authoritative and is not retried. A
    replica that failed is tried last until ``skip_s`` have passed.
    """

    def __init__(self, replicas: list[AgentRoute], skip_s: float) -> None:
        self.replicas = replicas
        self.skip_s = skip_s
        self._dead_until = [0.0] * len(replicas)
        self._lock = threading.Lock()

    def _order(self) -> list[int]:
        now = time.monotonic()
        with self._lock:
            alive = [i for i, until in enumerate(self._dead_until) if until <= now]
            dead = sorted((i for i, until in enumerate(self._dead_until) if until > now),
                          key=lambda i: self._dead_until[i])
        return alive + dead

    def _call(self, method: str, *args: object) -> object:
        last: errors.FluxonFsIOError | None = None
        for i in self._order():
            try:
                result = getattr(self.replicas[i], method)(*args)
            except errors.FluxonFsIOError as exc:
                if not is_unreachable(exc):
                    raise  # the storage answered: not found, permission, changed, short read
                skip_s = self.skip_s
                if isinstance(exc, errors.FluxonFsOverloadedError) and exc.retry_after_s:
                    skip_s = min(skip_s, exc.retry_after_s)  # it said when to come back
                with self._lock:
                    self._dead_until[i] = time.monotonic() + skip_s
                if len(self.replicas) > 1:
                    log.warning("agent %s cannot serve now (%s); skipping it for %.0f s",
                                self.replicas[i].url, exc, skip_s)
                last = exc
                continue
            with self._lock:
                self._dead_until[i] = 0.0
            return result
        assert last is not None
        raise last

    def stat(self, export: str, relpath: str, token: str) -> FileStat:
        return self._call("stat", export, relpath, token)  # type: ignore[return-value]

    def list(self, export: str, prefix: str, recursive: bool, pattern: str | None,
             cursor: str | None, limit: int, token: str) -> tuple[list[FluxonFsFileEntry], str | None]:
        return self._call("list", export, prefix, recursive, pattern, cursor, limit,
                          token)  # type: ignore[return-value]

    def read_chunk(self, export: str, relpath: str, offset: int, length: int,
                   expected: FileStat, token: str) -> bytes:
        return self._call("read_chunk", export, relpath, offset, length, expected,
                          token)  # type: ignore[return-value]

    def close(self) -> None:
        for replica in self.replicas:
            replica.close()


def is_unreachable(exc: errors.FluxonFsIOError) -> bool:
    """No answer about the file: a transport failure, or an agent that cannot take
    the call now (503), as opposed to the agent's answer (not found, permission, ...)."""
    return type(exc) in (errors.FluxonFsIOError, errors.FluxonFsTimeoutError,
                         errors.FluxonFsOverloadedError)


def _answer_limit(path: str, params: dict[str, object]) -> int:
    """The most a 200 answer to path may hold: a read's is exactly its length."""
    if path == "/v1/read":
        return int(params["length"])  # type: ignore[call-overload]
    return LIST_ANSWER_BYTES if path == "/v1/list" else SMALL_ANSWER_BYTES


def _retry_after(response: urllib3.BaseHTTPResponse) -> float | None:
    """Retry-After in seconds (the delay form; an HTTP date is ignored)."""
    value = response.headers.get("Retry-After", "").strip()
    return float(value) if value.isdigit() else None
