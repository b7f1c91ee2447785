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
}
_STATUS_ERRORS: dict[int, type[errors.FluxonFsError]] = {
    400: errors.FluxonFsBadRequestError,
    401: errors.FluxonFsPermissionError,
    403: errors.FluxonFsPermissionError,
    404: errors.FluxonFsNotFoundError,
    409: errors.FluxonFsFileChangedError,
}


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
        url = f"{self.url}{path}?{urlencode(params)}"
        try:
            response = self._pool().request("GET", url, headers={"Authorization": f"Bearer {token}"},
                                            preload_content=True)
        except urllib3.exceptions.HTTPError as exc:
            # With retries, urllib3 wraps the cause in MaxRetryError.
            cause = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
            # (a refused connection is a NewConnectionError, which urllib3 2 derives
            # from ConnectTimeoutError: it is no timeout)
            if (isinstance(cause, urllib3.exceptions.TimeoutError)
                    and not isinstance(cause, urllib3.exceptions.NewConnectionError)):
                raise errors.FluxonFsTimeoutError(
                    f"{what}: agent {self.url} timed out ({cause})") from None
            if isinstance(cause, urllib3.exceptions.SSLError):
                # A failed handshake: the certificate did not verify against the CA
                # bundle or name this host, or the agent does not speak TLS.
                raise errors.FluxonFsIOError(
                    f"{what}: TLS connection to agent {self.url} failed ({cause}); "
                    + ("check that client.agent_ca_bundle is the CA that signed the agent's "
                       "certificate and that the certificate names this host"
                       if self.ca_bundle else "a self-signed agent certificate needs "
                       "client.agent_ca_bundle (the CA's PEM file)")) from None
            if (self.url.startswith("http://")
                    and isinstance(cause, urllib3.exceptions.ProtocolError)):
                # What plain HTTP gets from a TLS listener: a closed connection.
                raise errors.FluxonFsIOError(
                    f"{what}: agent {self.url} closed the connection without answering; if it "
                    "serves HTTPS (--tls-cert), use an https:// agent_url") from None
            raise errors.FluxonFsIOError(f"{what}: agent {self.url} unreachable ({exc})") from None
        if response.status == 200:
            return response.data
        try:
            body = json.loads(response.data)
            cls = _ERROR_KINDS.get(body.get("error"), None)
            message = body.get("message", "")
        except (ValueError, AttributeError):
            cls, message = None, response.data[:200].decode("utf-8", "replace")
        message = message.removeprefix(f"{what}: ")  # the agent names the file too
        cls = cls or _STATUS_ERRORS.get(response.status, errors.FluxonFsIOError)
        raise cls(f"{what}: {message} (the agent answered {response.status})")

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
        page = json.loads(self._get("/v1/list", params, token, f"{export}:{prefix}"))
        return [FluxonFsFileEntry(**e) for e in page["entries"]], page["next"]

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
                with self._lock:
                    self._dead_until[i] = time.monotonic() + self.skip_s
                if len(self.replicas) > 1:
                    log.warning("agent %s did not answer (%s); skipping it for %.0f s",
                                self.replicas[i].url, exc, self.skip_s)
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
    """A transport failure (no answer), as opposed to an answer from the agent."""
    return type(exc) in (errors.FluxonFsIOError, errors.FluxonFsTimeoutError)
