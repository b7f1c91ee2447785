"""How the client reaches an export's storage: an agent over HTTP, or in-process.

Both routes answer the same two calls with the same exceptions, so the
client above them has one read path.
"""

from __future__ import annotations

import json
import os
import random
import ssl
import threading
import time
from typing import Protocol
from urllib.parse import urlencode

import urllib3

from fluxon_video import errors
from fluxon_video.fs.listing import FluxonFsFileEntry
from fluxon_video.fs.origin import FileStat
from fluxon_video.fs.paths import name_of
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
    "io": errors.FluxonFsIOError,  # the agent's object store failed (502), or refused (500)
    "timeout": errors.FluxonFsTimeoutError,  # the agent's object store did not answer (504)
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
# While no replica answers, the waits between rounds: exponential from the first,
# doubling up to the cap, each drawn between half and all of that (jitter, so the
# processes of a cluster do not come back in step). A restarted agent is found
# within BACKOFF_CAP_S of its coming back.
BACKOFF_FIRST_S = 0.1
BACKOFF_CAP_S = 2.0


class Route(Protocol):
    # wait=False: no retry window (a caller with a stale answer to fall back on).
    def stat(self, export: str, relpath: str, token: str, *, wait: bool = True) -> FileStat: ...

    # The stat and the version's first ``length`` bytes, in one request (None: the
    # agent sent the stat alone).
    def stat_head(self, export: str, relpath: str, token: str, length: int, *,
                  wait: bool = True) -> tuple[FileStat, bytes | None]: ...

    def list(self, export: str, prefix: str, recursive: bool, pattern: str | None,
             cursor: str | None, limit: int, token: str) -> tuple[list[FluxonFsFileEntry], str | None]: ...

    def read_chunk(self, export: str, relpath: str, offset: int, length: int,
                   expected: FileStat, token: str) -> bytes: ...

    def close(self) -> None: ...


class InProcessRoute:
    """The export served by this process, through the agent's own checks."""

    def __init__(self, storage: ExportStorage) -> None:
        self.storage = storage

    def stat(self, export: str, relpath: str, token: str, *, wait: bool = True) -> FileStat:
        return self.storage.stat(export, relpath, token)

    def stat_head(self, export: str, relpath: str, token: str, length: int, *,
                  wait: bool = True) -> tuple[FileStat, bytes | None]:
        return self.storage.stat_head(export, relpath, length, token)

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
        # No retries here: ReplicatedRoute retries a call that got no answer (on the
        # next replica, then with backoff for client.agent_retry_window_s), in one
        # place and without urllib3's warning per attempt. (A pooled keep-alive
        # connection the agent closed is replaced before use by urllib3 itself.)
        self._retries = urllib3.Retry(total=0, connect=0, read=0, status=0, redirect=0,
                                      raise_on_status=False)
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
            raise _lasting(errors.FluxonFsIOError(
                f"{what}: agent {self.url} sent a {declared}-byte answer where at most "
                f"{limit} were expected"))
        try:
            data = response.read(limit + 1)  # one byte past the limit tells a longer body
        except urllib3.exceptions.HTTPError as exc:
            raise self._transport_error(exc, what) from None
        if len(data) > limit:
            raise _lasting(errors.FluxonFsIOError(
                f"{what}: agent {self.url} sent an answer longer than the {limit} bytes "
                "expected"))
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
            failed = errors.FluxonFsIOError(
                f"{what}: TLS connection to agent {self.url} failed ({cause}); "
                + ("check that client.agent_ca_bundle is the CA that signed the agent's "
                   "certificate and that the certificate names this host"
                   if self.ca_bundle else "a self-signed agent certificate needs "
                   "client.agent_ca_bundle (the CA's PEM file)"))
            # A certificate that does not verify will not verify a moment later.
            return _lasting(failed) if _certificate_refused(cause) else failed
        if (self.url.startswith("http://")
                and isinstance(cause, urllib3.exceptions.ProtocolError)):
            # What plain HTTP gets from a TLS listener: a closed connection.
            return errors.FluxonFsIOError(
                f"{what}: agent {self.url} closed the connection without answering; if it "
                "serves HTTPS (--tls-cert), use an https:// agent_url")
        # (the cause's text: "...: Failed to establish a new connection: [Errno 111]
        # Connection refused", without urllib3's "Max retries exceeded" around it)
        return errors.FluxonFsIOError(f"{what}: agent {self.url} unreachable ({cause})")

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
        if what.endswith(":") and not message.startswith(f"{what}: "):
            what = what[:-1]  # "export:" (a list of the whole export) names the export
        message = message.removeprefix(f"{what}: ")  # the agent names the file too
        cls = cls or _STATUS_ERRORS.get(response.status, errors.FluxonFsIOError)
        if response.status == 401:  # the kind says "permission"; the status says which
            cls = errors.FluxonFsAuthenticationError
        retry_after = _retry_after(response)
        if response.status == 401:  # the token, not the file (ClientState names whose)
            message = f"agent {self.url} refused the token: {message}"
        if response.status in (429, 503):  # about the agent, not the file: name it
            message = f"agent {self.url}: {message}"
            if retry_after is not None:
                message += f"; it asks to retry after {retry_after:g} s"
        exc = cls(f"{what}: {message} (the agent answered {response.status})")
        if isinstance(exc, errors.FluxonFsOverloadedError):
            exc.retry_after_s = retry_after
        if response.status not in (502, 503, 504):
            # An agent that answered (a 500: its storage failed) says the same a
            # moment later; a gateway's 502/504 stands for an agent that did not.
            _lasting(exc)
        return exc

    def stat(self, export: str, relpath: str, token: str, *, wait: bool = True) -> FileStat:
        body = self._get("/v1/stat", {"export": export, "path": relpath}, token,
                         f"{export}:{relpath}")
        return self._stat_of(body, export, relpath)

    def stat_head(self, export: str, relpath: str, token: str, length: int, *,
                  wait: bool = True) -> tuple[FileStat, bytes | None]:
        body = self._get("/v1/stat", {"export": export, "path": relpath, "head": length}, token,
                         f"{export}:{relpath}")
        line, _, head = body.partition(b"\n")
        st = self._stat_of(line, export, relpath)
        if b'"head"' not in line:
            return st, None  # an agent that predates heads sent the stat alone
        if len(head) != min(length, st.size):
            raise errors.FluxonFsShortReadError(
                f"{export}:{relpath}: agent returned {len(head)} bytes of the file's head, "
                f"not {min(length, st.size)}")
        return st, head

    def _stat_of(self, body: bytes, export: str, relpath: str) -> FileStat:
        try:
            return FileStat.from_fields(json.loads(body))
        except (ValueError, KeyError, TypeError) as exc:
            raise _lasting(errors.FluxonFsIOError(
                f"{export}:{relpath}: agent {self.url} sent a stat this client cannot read "
                f"({exc})")) from None

    def list(self, export: str, prefix: str, recursive: bool, pattern: str | None,
             cursor: str | None, limit: int, token: str) -> tuple[list[FluxonFsFileEntry], str | None]:
        params: dict[str, object] = {"export": export, "prefix": prefix,
                                     "recursive": int(recursive), "limit": limit}
        if pattern:
            params["pattern"] = pattern
        if cursor:
            params["cursor"] = cursor
        what = name_of(export, prefix)
        body = self._get("/v1/list", params, token, what)
        try:
            page = json.loads(body)
            return [FluxonFsFileEntry(**e) for e in page["entries"]], page["next"]
        except (ValueError, KeyError, TypeError) as exc:
            raise _lasting(errors.FluxonFsIOError(
                f"{what}: agent {self.url} sent a list page this client cannot read "
                f"({exc})")) from None

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
    """Agents serving the same storage: fail over, skip a dead one for a while, and
    wait out an outage of them all.

    stat, list and read_chunk are idempotent, so a call that finds a replica
    unreachable or timing out is retried on the next one. An answer (file not
    found, permission, changed) is authoritative and is not retried. A
    replica that failed is tried last until ``skip_s`` have passed.

    When no replica answers (connection refused or reset, a timeout, a 503),
    the call tries them all again after a backoff (BACKOFF_FIRST_S doubling up
    to BACKOFF_CAP_S, with jitter, and at least a 503's Retry-After) until
    ``retry_window_s`` have passed since it began, then raises the last error,
    saying how long it waited: an agent restart costs a wait, not the run. A
    stat with ``wait=False`` makes one round (its caller has a stale stat to
    fall back on). The log gets one warning per outage (from the first call
    that waits), one per replica failing over, and one info line when an agent
    answers again.
    """

    def __init__(self, replicas: list[AgentRoute], skip_s: float,
                 retry_window_s: float = 0.0) -> None:
        self.replicas = replicas
        self.skip_s = skip_s
        self.retry_window_s = retry_window_s
        self._dead_until = [0.0] * len(replicas)
        # When each replica, and all of them at once, stopped answering (None: it
        # answers); whether a call waiting for one has said so in this outage.
        self._down_since: list[float | None] = [None] * len(replicas)
        self._outage_since: float | None = None
        self._outage_told = False
        self._lock = threading.Lock()

    def _order(self) -> list[int]:
        now = time.monotonic()
        with self._lock:
            alive = [i for i, until in enumerate(self._dead_until) if until <= now]
            dead = sorted((i for i, until in enumerate(self._dead_until) if until > now),
                          key=lambda i: self._dead_until[i])
        return alive + dead

    def _call(self, method: str, *args: object, wait: bool = True) -> object:
        window = self.retry_window_s if wait else 0.0
        started = time.monotonic()
        rounds = 0
        while True:
            last: errors.FluxonFsIOError | None = None
            worth_waiting = False
            for i in self._order():
                try:
                    result = getattr(self.replicas[i], method)(*args)
                except errors.FluxonFsIOError as exc:
                    if not is_unreachable(exc):
                        raise  # the storage answered: not found, permission, changed, short read
                    self._failed(i, exc)
                    last = exc
                    worth_waiting |= waiting_helps(exc)
                    continue
                self._answered(i)
                return result
            assert last is not None
            rounds += 1
            if worth_waiting:
                self._outage()
            waited = time.monotonic() - started
            if not worth_waiting or waited >= window:
                if rounds == 1:
                    raise last  # its caller says what it does about it (a stale stat, or fails)
                raise self._gave_up(last, waited)
            if rounds == 1:
                self._tell_outage(last)
            delay = min(BACKOFF_CAP_S, BACKOFF_FIRST_S * 2 ** (rounds - 1))
            delay = random.uniform(delay / 2, delay)
            if isinstance(last, errors.FluxonFsOverloadedError) and last.retry_after_s:
                delay = max(delay, last.retry_after_s)  # it said when to come back
            time.sleep(min(delay, window - waited))

    def _failed(self, i: int, exc: errors.FluxonFsIOError) -> None:
        skip_s = self.skip_s
        if isinstance(exc, errors.FluxonFsOverloadedError) and exc.retry_after_s:
            skip_s = min(skip_s, exc.retry_after_s)  # it said when to come back
        now = time.monotonic()
        with self._lock:
            self._dead_until[i] = now + skip_s
            first = self._down_since[i] is None
            if first:
                self._down_since[i] = now
        if first and len(self.replicas) > 1:
            log.warning("agent %s cannot serve now (%s); failing over, and trying it last for "
                        "%.0f s", self.replicas[i].url, exc, skip_s)

    def _answered(self, i: int) -> None:
        with self._lock:
            self._dead_until[i] = 0.0
            down, self._down_since[i] = self._down_since[i], None
            outage, self._outage_since = self._outage_since, None
            self._outage_told = False
        if outage is not None:
            log.info("agent %s answers again (no agent answered for %.1f s)",
                     self.replicas[i].url, time.monotonic() - outage)
        elif down is not None and len(self.replicas) > 1:
            log.info("agent %s answers again", self.replicas[i].url)

    def _outage(self) -> None:
        """Note that no replica answers (the info line when one does again says how long)."""
        with self._lock:
            if self._outage_since is None:
                self._outage_since = time.monotonic()

    def _tell_outage(self, exc: errors.FluxonFsIOError) -> None:
        """The one warning of an outage, by the first call that waits for it."""
        with self._lock:
            if self._outage_told:
                return
            self._outage_told = True
        which = ("" if len(self.replicas) == 1 else
                 f"no agent of {', '.join(r.url for r in self.replicas)} answers; the last: ")
        log.warning("%s%s; retrying for up to %g s (client.agent_retry_window_s)", which, exc,
                    self.retry_window_s)

    def _gave_up(self, last: errors.FluxonFsIOError, waited: float) -> errors.FluxonFsIOError:
        """The last error, saying that no agent answered for the whole window."""
        exc = type(last)(f"{last}; no agent answered for {waited:.1f} s "
                         f"(client.agent_retry_window_s = {self.retry_window_s:g})")
        if isinstance(last, errors.FluxonFsOverloadedError):
            exc.retry_after_s = last.retry_after_s
        return exc

    def stat(self, export: str, relpath: str, token: str, *, wait: bool = True) -> FileStat:
        return self._call("stat", export, relpath, token, wait=wait)  # type: ignore[return-value]

    def stat_head(self, export: str, relpath: str, token: str, length: int, *,
                  wait: bool = True) -> tuple[FileStat, bytes | None]:
        return self._call("stat_head", export, relpath, token, length,  # type: ignore[return-value]
                          wait=wait)

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


def waiting_helps(exc: errors.FluxonFsIOError) -> bool:
    """Whether the same call may succeed a moment later: no agent answered (refused,
    reset, timed out) or one asked to come back (503). Not an answer (4xx, a 500),
    nor what waiting cannot change (a certificate that does not verify, an answer
    this client cannot read)."""
    return is_unreachable(exc) and not getattr(exc, "lasting", False)


def _lasting(exc: errors.FluxonFsIOError) -> errors.FluxonFsIOError:
    """Mark exc as no agent's absence: replicas fail over, nobody waits for it."""
    exc.lasting = True  # type: ignore[attr-defined]
    return exc


def _certificate_refused(cause: BaseException) -> bool:
    """Whether a TLS failure is the agent's certificate not verifying (or not naming
    the host), rather than a handshake cut short."""
    found = (cause.__context__, cause.__cause__, *getattr(cause, "args", ()))
    return (any(isinstance(c, ssl.SSLCertVerificationError) for c in found)
            or "CERTIFICATE_VERIFY_FAILED" in str(cause))


def _answer_limit(path: str, params: dict[str, object]) -> int:
    """The most a 200 answer to path may hold: a read's is exactly its length."""
    if path == "/v1/read":
        return int(params["length"])  # type: ignore[call-overload]
    if "head" in params:  # the stat's line, then at most that many bytes
        return SMALL_ANSWER_BYTES + int(params["head"])  # type: ignore[call-overload]
    return LIST_ANSWER_BYTES if path == "/v1/list" else SMALL_ANSWER_BYTES


def _retry_after(response: urllib3.BaseHTTPResponse) -> float | None:
    """Retry-After in seconds (the delay form; an HTTP date is ignored)."""
    value = response.headers.get("Retry-After", "").strip()
    return float(value) if value.isdigit() else None
