"""The FluxonFS agent: serves stat, list and read_chunk for export roots over HTTP/1.1.

    fluxon-video agent --config agent.toml --listen 0.0.0.0:8765 \
        --tls-cert agent.crt --tls-key agent.key

Built on aiohttp (asyncio, HTTP/1.1 keep-alive, maintained, small): the agent
is I/O-bound and serves many training processes at once, so one event loop
with file reads in a thread pool is the right shape; it never decodes video
and never reads more of a file than the range asked for.

Protocol (every request carries ``Authorization: Bearer <token>``):

    GET /v1/stat?export=E&path=P
        -> {"size": N, "mtime_ns": T, "ctime_ns": C, "inode": I}
    GET /v1/read?export=E&path=P&offset=O&length=L&size=N&mtime_ns=T&ctime_ns=C&inode=I
        -> bytes
    GET /v1/list?export=E&prefix=P&recursive=1&pattern=G&cursor=C&limit=N
        -> {"entries": [{"relpath", "size", "mtime_ns", "is_dir"}], "next": C or null}
    GET /healthz                                      -> "ok" (no token)
    GET /metrics                                      -> Prometheus text format (a token
                                                         only with ``metrics_token``)

Errors are JSON ``{"error": kind, "message": text}`` with status 400 (bad
request), 401/403 (permission), 404 (not found), 409 (file changed), 429 (too
many failed authentications from the client's address), 500 (internal), 503
(the agent cannot take the request now: its connection table is full, or the
host is out of descriptors or memory); 429 and 503 carry Retry-After. With a
certificate and key the agent serves HTTPS (TLS 1.2 with AEAD suites, or
1.3); SIGTERM and SIGINT stop it gracefully (no new connections, requests in
flight finish); SIGHUP reloads the config file (identities and exports)
without dropping a connection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import hashlib
import hmac
import ipaddress
import logging
import math
import os
import resource
import signal
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cachetools
from aiohttp import web
from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram,
                               PlatformCollector, ProcessCollector, generate_latest)

from fluxon_video import errors
from fluxon_video.fs.config import FluxonFsConfig, load_config
from fluxon_video.fs.listing import FluxonFsFileEntry
from fluxon_video.fs.origin import FileStat
from fluxon_video.fs.paths import EXHAUSTED_ERRNOS
from fluxon_video.fs.storage import ExportStorage
from fluxon_video.fs.tokens import check_strength
from fluxon_video.logs import RateLimited

log = logging.getLogger("fluxon_video.agent")
limited_log = RateLimited(log, interval_s=10.0)

# Most specific first: FileNotFoundError-derived classes before their bases.
ERROR_STATUS: list[tuple[type[BaseException], int, str]] = [
    (errors.FluxonFsOverloadedError, 503, "unavailable"),
    (errors.FluxonFsBadRequestError, 400, "bad_request"),
    (errors.FluxonFsAuthenticationError, 401, "permission"),
    (errors.FluxonFsPermissionError, 403, "permission"),
    (errors.FluxonFsNotFoundError, 404, "not_found"),
    (errors.FluxonFsFileChangedError, 409, "changed"),
    (errors.FluxonFsShortReadError, 409, "changed"),
]

# The error kinds the agent answers with: the reasons of fluxon_agent_refusals_total.
REFUSAL_REASONS = ("bad_request", "permission", "not_found", "changed", "internal")
# The kinds of the agent's own limits, reasons of the same counter: a 429 for an
# address that failed to authenticate too often, a 503 when it cannot take a request.
LIMIT_REASONS = ("throttled", "unavailable")
# OS errors that say the host is out of something, not that the request is wrong: a 503.
# What a 429 or 503 asks a client to wait at least (seconds): connections and
# descriptors free up as fast as requests end.
RETRY_AFTER_S = 1
# Request latency buckets (seconds): a page read from local disk takes well under a
# millisecond, one from a network file system or with injected latency much longer.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0)
# On SIGTERM/SIGINT, how long requests in flight get to finish before they are cancelled.
SHUTDOWN_TIMEOUT_S = 60.0
# Connections (see ConnectionTable). From accept to a first request's headers, a
# TLS handshake included: a client that connects sends at once, so this only
# bounds connections that send nothing (or a byte at a time).
HEADER_TIMEOUT_S = 10.0
# An idle keep-alive connection is closed after this (aiohttp's run_app default).
KEEPALIVE_TIMEOUT_S = 75.0
# Descriptors the default connection limit leaves for other things: stdio, the
# event loop's, the listener, logs, imports; and per I/O thread, one file
# operation's (the root, a directory on the way down, the file, a listing's scandir).
RESERVED_FDS = 16
FDS_PER_IO_THREAD = 4
MIN_CONNECTIONS = 16
MAX_DEFAULT_CONNECTIONS = 65536  # beyond this, memory rather than descriptors is the limit
# A new connection closes an idle one to make room only if it was idle this long
# (a real client sends its request as soon as it is connected).
EVICT_AFTER_S = 0.5
# After a failed accept() (EMFILE and the like): the connection waits in the backlog.
ACCEPT_RETRY_S = 0.5
# Failed authentications per client address (see AuthThrottle): a burst, then a rate.
AUTH_FAILURE_BURST = 20
AUTH_FAILURE_RATE = 5.0
# The bearer token /metrics asks for, when run_agent is not given one.
METRICS_TOKEN_ENV = "FLUXON_METRICS_TOKEN"
# TLS 1.2 suites: forward secrecy and AEAD only (no CBC, no RSA key exchange).
# TLS 1.3's suites are all AEAD and not affected by set_ciphers.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL"
# Set on an error response: its kind (aiohttp >= 3.13 has typed response keys).
_REFUSAL: Any = (web.ResponseKey("fluxon_refusal", str) if hasattr(web, "ResponseKey")
                 else "fluxon_refusal")


class AgentMetrics:
    """The agent's Prometheus metrics, in a registry of their own.

    One per app (not prometheus_client's global registry), so several agents
    can run in one process (tests) without their series colliding.
    """

    def __init__(self, io_threads: int) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("fluxon_agent_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=r)
        self.served_bytes = Counter("fluxon_agent_served_bytes",
                                    "File bytes returned by /v1/read, by export", ["export"],
                                    registry=r)
        self.latency = Histogram("fluxon_agent_request_duration_seconds",
                                 "Time from routing a request to its answer, by route "
                                 "(/metrics not included)", ["route"], buckets=LATENCY_BUCKETS,
                                 registry=r)
        self.in_flight = Gauge("fluxon_agent_requests_in_flight",
                               "Requests being handled (/metrics not included)", registry=r)
        self.refusals = Counter("fluxon_agent_refusals", "Requests refused, by reason (the error kind)",
                                ["reason"], registry=r)
        for reason in REFUSAL_REASONS + LIMIT_REASONS:
            self.refusals.labels(reason)  # every reason is exported from the start, at 0
        self.connections = Gauge("fluxon_agent_connections",
                                 "Client connections open (TLS handshakes included)", registry=r)
        self.connections_limit = Gauge("fluxon_agent_connections_limit",
                                       "Connections served at once (--max-connections)",
                                       registry=r)
        self.connections_closed = Counter(
            "fluxon_agent_connections_closed",
            "Connections the agent closed to stay within its limits, by reason: evicted "
            "(idle, to make room for a new one), header_timeout (no request in time)",
            ["reason"], registry=r)
        for reason in ("evicted", "header_timeout"):
            self.connections_closed.labels(reason)
        self.io_threads = Gauge("fluxon_agent_io_threads",
                                "Threads for file work: stat, read, listing (--io-threads)",
                                registry=r)
        self.io_threads.set(io_threads)
        self.io_busy = Gauge("fluxon_agent_io_threads_busy", "I/O threads doing file work now",
                             registry=r)
        self.io_queued = Gauge("fluxon_agent_io_queued",
                               "File operations waiting for a free I/O thread", registry=r)
        ProcessCollector(registry=r)  # process_cpu_seconds_total, process_resident_memory_bytes, ...
        PlatformCollector(registry=r)  # python_info
        self.active = 0  # == in_flight, readable for the shutdown log

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class ReloadableStorage:
    """The ExportStorage requests go to, replaced whole when the config is reloaded.

    The swap is one attribute assignment on the event loop's thread, so a
    request never sees half of each config. A file operation already running
    finishes on the storage it started with; one that starts after the swap
    (arriving later, or queued for an I/O thread) is checked against the new
    config: a token removed from the file stops working at once.
    """

    def __init__(self, storage: ExportStorage) -> None:
        self.current = storage

    def stat(self, export_name: str, relpath: str, token: str | None) -> FileStat:
        return self.current.stat(export_name, relpath, token)

    def read_chunk(self, export_name: str, relpath: str, offset: int, length: int,
                   expected: FileStat, token: str | None) -> bytes:
        return self.current.read_chunk(export_name, relpath, offset, length, expected, token)

    def list(self, export_name: str, prefix: str, recursive: bool, pattern: str | None,
             cursor: str | None, limit: int, token: str | None
             ) -> tuple[list[FluxonFsFileEntry], str | None]:
        return self.current.list(export_name, prefix, recursive, pattern, cursor, limit, token)


STORAGE_KEY = web.AppKey("storage", ReloadableStorage)
POOL_KEY = web.AppKey("pool", concurrent.futures.ThreadPoolExecutor)
METRICS_KEY = web.AppKey("metrics", AgentMetrics)
METRICS_TOKEN_KEY = web.AppKey("metrics_token", bytes)  # its SHA-256; empty: /metrics is open


def _refusal(status: int, kind: str, message: str,
             retry_after_s: int = RETRY_AFTER_S) -> web.Response:
    """An error answer: JSON with its kind (which the metrics count)."""
    response = web.json_response({"error": kind, "message": message}, status=status)
    response[_REFUSAL] = kind
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="fluxon-agent"'
    if status in (429, 503):
        response.headers["Retry-After"] = str(retry_after_s)
    if status in (401, 429, 503):
        # No keep-alive for a client that did not authenticate, or that the agent
        # cannot serve now: its connection's slot and descriptor go back at once.
        response.force_close()
    return response


def _exhausted(exc: BaseException) -> bool:
    """An error saying the host is out of descriptors or memory (not about the request)."""
    return isinstance(exc, MemoryError) or (
        isinstance(exc, OSError) and not isinstance(exc, errors.FluxonFsError)
        and exc.errno in EXHAUSTED_ERRNOS)


def _error_response(exc: BaseException, request: web.Request) -> web.Response:
    if _exhausted(exc):
        reason = getattr(exc, "strerror", None) or "out of memory"
        exc = errors.FluxonFsOverloadedError(f"the storage host is out of resources ({reason})")
    for cls, status, kind in ERROR_STATUS:
        if isinstance(exc, cls):
            if status == 503:
                limited_log.warning("unavailable", "answering 503 to %s: %s", request.path, exc)
            return _refusal(status, kind, str(exc))
    # Details stay in the agent's log: an unexpected error's text may name host paths.
    log.error("internal error in %s (export %r, path %r): %s", request.path,
              request.query.get("export"), request.query.get("path"), exc, exc_info=exc)
    return _refusal(500, "internal", "internal error (see the agent's log)")


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _int_param(request: web.Request, name: str) -> int:
    raw = request.query.get(name)
    try:
        return int(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise errors.FluxonFsBadRequestError(f"query parameter {name} must be an int, got {raw!r}") from None


def _str_param(request: web.Request, name: str) -> str:
    raw = request.query.get(name)
    if not raw:
        raise errors.FluxonFsBadRequestError(f"query parameter {name} is required")
    return raw


async def _in_pool(request: web.Request, fn: Callable[..., Any], *args: Any) -> Any:
    metrics = request.app[METRICS_KEY]

    def run() -> Any:
        metrics.io_queued.dec()
        metrics.io_busy.inc()
        try:
            return fn(*args)
        finally:
            metrics.io_busy.dec()

    metrics.io_queued.inc()
    future = request.app[POOL_KEY].submit(run)
    # Cancelled before it ran (the pool shutting down): it never left the queue.
    future.add_done_callback(lambda f: metrics.io_queued.dec() if f.cancelled() else None)
    return await asyncio.wrap_future(future)


async def handle_stat(request: web.Request) -> web.Response:
    try:
        st = await _in_pool(request, request.app[STORAGE_KEY].stat,
                            _str_param(request, "export"), _str_param(request, "path"),
                            _bearer(request))
    except Exception as exc:  # noqa: BLE001 - every error becomes a status
        return _error_response(exc, request)
    return web.json_response({**st.as_fields(), "is_file": True})


async def handle_read(request: web.Request) -> web.Response:
    try:
        expected = FileStat(*(_int_param(request, name) for name in FileStat.INTS),
                            etag=request.query.get("etag", ""))
        data = await _in_pool(request, request.app[STORAGE_KEY].read_chunk,
                              _str_param(request, "export"), _str_param(request, "path"),
                              _int_param(request, "offset"), _int_param(request, "length"),
                              expected, _bearer(request))
    except Exception as exc:  # noqa: BLE001
        return _error_response(exc, request)
    return web.Response(body=data, content_type="application/octet-stream")


async def handle_list(request: web.Request) -> web.Response:
    try:
        entries, cursor = await _in_pool(
            request, request.app[STORAGE_KEY].list, _str_param(request, "export"),
            request.query.get("prefix", ""), request.query.get("recursive", "1") != "0",
            request.query.get("pattern") or None, request.query.get("cursor") or None,
            _int_param(request, "limit") if "limit" in request.query else 1000,
            _bearer(request))
    except Exception as exc:  # noqa: BLE001
        return _error_response(exc, request)
    return web.json_response({"entries": [e.as_dict() for e in entries], "next": cursor})


async def handle_health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def handle_metrics(request: web.Request) -> web.Response:
    expected = request.app[METRICS_TOKEN_KEY]
    if expected and not _token_matches(_bearer(request), expected):
        return _refusal(401, "permission", "/metrics: unknown or missing bearer token (this "
                                           "agent's metrics need its metrics token)")
    return web.Response(body=request.app[METRICS_KEY].exposition(),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})


def _sha256(token: str) -> bytes:
    # surrogatepass: whatever a header decoded to hashes, rather than raising.
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def _token_matches(token: str | None, expected_sha256: bytes) -> bool:
    """Constant time: digests of equal length, whatever the token's length."""
    return token is not None and hmac.compare_digest(_sha256(token), expected_sha256)


def _route_label(request: web.Request) -> str:
    # The route's pattern, never the raw path: label values stay a small fixed set.
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def _metrics_middleware(metrics: AgentMetrics) -> Any:
    """Count every request: by route and status, its latency, refusals, bytes served."""

    @web.middleware
    async def count(request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        route = _route_label(request)
        if route == "/metrics":  # a scrape is counted, but not timed nor in flight
            response = await handler(request)
            metrics.requests.labels(route, str(response.status)).inc()
            return response
        metrics.in_flight.inc()
        metrics.active += 1
        start = time.perf_counter()
        status: int | None = 500
        reason: str | None = "internal"
        response: web.StreamResponse | None = None
        try:
            response = await handler(request)
            status, reason = response.status, response.get(_REFUSAL)
            return response
        except web.HTTPException as exc:  # aiohttp's own answers: unknown route, bad method
            status, reason = exc.status, None
            raise
        except asyncio.CancelledError:  # cancelled at the end of the shutdown timeout
            status = None
            raise
        finally:
            metrics.in_flight.dec()
            metrics.active -= 1
            if status is not None:
                metrics.latency.labels(route).observe(time.perf_counter() - start)
                metrics.requests.labels(route, str(status)).inc()
                if reason is not None:
                    metrics.refusals.labels(reason).inc()
                if (route == "/v1/read" and status == 200 and request.method == "GET"
                        and response is not None):
                    metrics.served_bytes.labels(request.query.get("export", "")).inc(
                        response.content_length or 0)

    return count


def _latency_middleware(seconds: float) -> Any:
    """Delay every stat and read answer by ``seconds`` (models a remote store in benchmarks)."""

    @web.middleware
    async def delay(request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        if request.path in ("/v1/read", "/v1/stat"):
            await asyncio.sleep(seconds)
        return await handler(request)

    return delay


# ---- failed authentications ----

@dataclass
class _Budget:
    """A client address's failed-authentication budget: a token bucket."""

    left: float  # failures it may still have before it is throttled
    at: float  # when ``left`` was last brought up to date


def client_key(remote: str | None) -> str:
    """What the throttle counts a client by: its IP address, an IPv6 one by its /64
    (which one host usually holds whole: counting each address would give it 2**64
    budgets)."""
    try:
        ip = ipaddress.ip_address(remote or "")
    except ValueError:
        return remote or "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class AuthThrottle:
    """Failed authentications per client address: ``burst`` at once, then ``per_s``
    per second; past that, the address's requests are answered 429 + Retry-After.

    Only failures (401 answers) spend the budget: an address that never failed
    is never throttled. Once one has failed, each of its requests is charged
    in advance and refunded unless it fails, so requests sent at once cannot
    overdraw the budget. A throttled address's requests are refused without
    their token being checked (a 429 that still told a right guess from a
    wrong one would not slow guessing down), except those carrying a token
    that authenticated recently from anywhere, which are neither charged nor
    refused: a good client sharing the address of a guessing one (NAT, the
    same host) keeps being served. Checking a token costs one SHA-256
    (fs/tokens.py).

    Addresses and good tokens (their SHA-256) are kept in LRU maps of bounded
    size: an attacker with more addresses than ``clients`` can make the agent
    forget one, which only resets that address's budget.
    """

    def __init__(self, burst: int = AUTH_FAILURE_BURST, per_s: float = AUTH_FAILURE_RATE,
                 clients: int = 65536, good_tokens: int = 4096, good_ttl_s: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst, self.per_s, self.clock = burst, per_s, clock
        self._budgets: cachetools.LRUCache[str, _Budget] = cachetools.LRUCache(maxsize=clients)
        self._good: cachetools.TTLCache[bytes, bool] = cachetools.TTLCache(
            maxsize=good_tokens, ttl=good_ttl_s, timer=clock)

    def _budget(self, client: str) -> _Budget | None:
        budget = self._budgets.get(client)
        if budget is not None:
            now = self.clock()
            budget.left = min(self.burst, budget.left + (now - budget.at) * self.per_s)
            budget.at = now
        return budget

    def admit(self, client: str, token: str | None) -> tuple[bool, float | None]:
        """(charged, wait): wait is None to go ahead, else the seconds the address
        must wait (429); charged says a failure was charged in advance (settle())."""
        budget = self._budget(client)
        if budget is None or (token and _sha256(token) in self._good):
            return False, None
        if budget.left >= 1:
            budget.left -= 1
            return True, None
        return False, (1 - budget.left) / self.per_s

    def settle(self, client: str, token: str | None, status: int, charged: bool) -> None:
        """The answer to a request admit() let through: a 401 is a failure."""
        if status == 401:
            if not charged:
                self._failed(client)
            return
        if charged:  # not a failure: give the advance back
            budget = self._budget(client)
            if budget is not None:
                budget.left = min(self.burst, budget.left + 1)
        if status == 200 and token:
            self._good[_sha256(token)] = True

    def _failed(self, client: str) -> None:
        budget = self._budget(client)
        if budget is None:
            budget = self._budgets[client] = _Budget(float(self.burst), self.clock())
        budget.left = max(0.0, budget.left - 1)

    def forget_tokens(self) -> None:
        """After a reload: a token the new config dropped earns no exemption."""
        self._good.clear()


# ---- connections ----

@dataclass(eq=False)
class _Connection:
    """One accepted connection, as the ConnectionTable sees it."""

    deadline: float  # loop time by which its first request must have arrived
    admitted: bool = False  # counted against the limit: its requests are served
    handler: Any = None  # aiohttp's RequestHandler, once made (after a TLS handshake)
    making: asyncio.Task[None] | None = None  # until then, what makes it
    busy: int = 0  # requests being handled
    requests: int = 0  # requests seen
    proven: bool = False  # it had a request served: its client holds a good token
    closed: bool = False


class ConnectionTable:
    """Bounds the agent's connections, so that they can never take the
    descriptors file work needs (EMFILE, answered 404 before this existed).

    The agent accepts connections itself rather than through asyncio's server
    (``serve``), so every accepted socket is counted, TLS handshakes included:

    - ``limit`` connections are admitted (served) at once. Past it, an idle
      admitted connection is closed to make room, as nginx reuses keep-alive
      connections, so idle connections cannot keep out a client with a
      request to make. Idle: no request in progress and no bytes of one
      received (a TLS handshake in progress too); the one idle the longest
      goes first, among connections that
      never had a request served, then among those that had (so a client
      without a good token can only ever push out its own kind). A new
      connection makes room only from connections idle EVICT_AFTER_S or more
      (a real client sends as soon as it is connected); a request arriving on
      a connection not admitted yet, from any idle one. With none idle, that
      request is answered 503 + Retry-After and its connection closed;
    - ``cap`` (``limit`` plus a margin for those 503s) bounds the sockets
      open: there the agent accepts only once one closes (an idle one is
      closed to that end), later clients waiting in the listen backlog, and
      the descriptors left are the file work's;
    - a connection must send its first request's headers within
      ``header_timeout_s`` of its accept (TLS handshake included), or it is
      closed. Later idle time is aiohttp's keep-alive timeout.
    """

    def __init__(self, limit: int, header_timeout_s: float = HEADER_TIMEOUT_S,
                 cap: int | None = None,
                 on_close: Callable[[str], None] = lambda reason: None) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise errors.FluxonFsConfigError(f"max connections must be an int >= 1, got {limit!r}")
        if not header_timeout_s > 0:
            raise errors.FluxonFsConfigError(
                f"the header timeout must be > 0 s, got {header_timeout_s!r}")
        self.limit = limit
        self.cap = cap if cap is not None else limit + _margin(limit)
        self.header_timeout_s = header_timeout_s
        self.open = 0  # accepted and not closed yet
        self.admitted = 0
        self._on_close = on_close
        # Idle made connections -> the loop time they became idle, the longest idle
        # first: those never served (closed first to make room), and those served.
        self._idle_unproven: OrderedDict[_Connection, float] = OrderedDict()
        self._idle_proven: OrderedDict[_Connection, float] = OrderedDict()
        self._by_handler: dict[Any, _Connection] = {}
        self._room = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    async def serve(self, listener: socket.socket, protocol_factory: Callable[[], Any],
                    ssl_context: ssl.SSLContext | None) -> None:
        """Accept connections on listener until cancelled; protocol_factory makes
        aiohttp's protocol for each (the runner's server)."""
        loop = asyncio.get_running_loop()
        listener.setblocking(False)
        while True:
            await self._below_cap()
            try:
                sock, _ = await loop.sock_accept(listener)
            except OSError as exc:
                await self._accept_failed(exc)
                continue
            self.open += 1
            entry = _Connection(deadline=loop.time() + self.header_timeout_s)
            self._admit(entry, EVICT_AFTER_S)  # else, when its first request comes
            entry.making = loop.create_task(
                self._connect(sock, entry, protocol_factory, ssl_context))
            self._idle_unproven[entry] = loop.time()
            self._tasks.add(entry.making)
            entry.making.add_done_callback(self._tasks.discard)
            # Let the connections made so far read their requests before the next accept.
            await asyncio.sleep(0)

    async def _below_cap(self) -> None:
        while self.open >= self.cap:
            self._room.clear()
            self._evict(EVICT_AFTER_S, admitted_only=False)
            try:  # a close, or time for a connection to become idle long enough
                await asyncio.wait_for(self._room.wait(), EVICT_AFTER_S)
            except asyncio.TimeoutError:
                pass

    async def _accept_failed(self, exc: OSError) -> None:
        if exc.errno == errno.ECONNABORTED:  # the client went away before the accept
            return
        # Out of descriptors (something other than connections holds them) or
        # memory: the client waits in the backlog until a retry.
        limited_log.warning("accept", "cannot accept a connection (%s); retrying in %.1f s",
                            exc.strerror or exc, ACCEPT_RETRY_S)
        await asyncio.sleep(ACCEPT_RETRY_S)

    async def _connect(self, sock: socket.socket, entry: _Connection,
                       protocol_factory: Callable[[], Any],
                       ssl_context: ssl.SSLContext | None) -> None:
        loop = asyncio.get_running_loop()
        handshake_s = max(entry.deadline - loop.time(), 0.001) if ssl_context else None
        try:
            await loop.connect_accepted_socket(
                lambda: _CountedProtocol(self, entry, protocol_factory()), sock,
                ssl=ssl_context, ssl_handshake_timeout=handshake_s)
        except Exception as exc:  # noqa: BLE001 - a failed or slow TLS handshake, a reset
            log.debug("connection dropped before it was made: %r", exc)
        finally:  # (cancelled: closed to make room, or the agent stopping)
            if entry.handler is None:
                sock.close()  # (asyncio closed it already, unless it failed before)
                self.closed(entry)

    def _admit(self, entry: _Connection, idle_s: float) -> bool:
        """Count entry against the limit, closing a connection idle for idle_s or
        more to make room if need be; False if it must wait."""
        if self.admitted >= self.limit and not self._evict(idle_s, admitted_only=True):
            return False
        entry.admitted = True
        self.admitted += 1
        return True

    def _evict(self, idle_s: float, admitted_only: bool) -> bool:
        """Close the connection idle the longest, if idle for idle_s or more; False if
        there is none. One that had a request served goes only when no idle one
        never had (if those are too recent, none goes: they will not be for long)."""
        now = asyncio.get_running_loop().time()
        for idle in (self._idle_unproven, self._idle_proven):
            entry, since = next(((e, t) for e, t in idle.items()  # the longest idle first
                                 if e.admitted or not admitted_only), (None, 0.0))
            if entry is None:
                continue
            if now - since < idle_s:
                return False
            del idle[entry]
            if entry.admitted:  # its place is the new one's from now
                entry.admitted = False
                self.admitted -= 1
            if entry.handler is not None:
                entry.handler.force_close()
            elif entry.making is not None:  # still in its TLS handshake
                entry.making.cancel()
            self._on_close("evicted")
            return True
        return False

    def _idle(self, entry: _Connection) -> OrderedDict[_Connection, float]:
        return self._idle_proven if entry.proven else self._idle_unproven

    def made(self, entry: _Connection, handler: Any) -> None:
        entry.handler = handler
        self._by_handler[handler] = entry
        loop = asyncio.get_running_loop()
        self._idle(entry).pop(entry, None)  # idle from now: its request comes next
        self._idle(entry)[entry] = loop.time()
        loop.call_at(entry.deadline, self._first_request_due, entry)

    def _first_request_due(self, entry: _Connection) -> None:
        if not entry.closed and entry.requests == 0:
            entry.handler.force_close()
            self._on_close("header_timeout")

    def received(self, entry: _Connection) -> None:
        """Bytes of a request arrived: not idle until it is answered."""
        self._idle(entry).pop(entry, None)

    def started(self, handler: Any) -> _Connection | None:
        """A request began on handler's connection (None: not one of the table's);
        if the connection is not admitted after this, the request gets a 503."""
        entry = self._by_handler.get(handler)
        if entry is not None:
            entry.busy += 1
            entry.requests += 1
            self._idle(entry).pop(entry, None)
            if not entry.admitted:
                self._admit(entry, 0.0)
        return entry

    def finished(self, entry: _Connection, served: bool) -> None:
        """The request begun with started() was answered; served: with a 200 that
        needed a good token."""
        entry.busy -= 1
        entry.proven = entry.proven or served
        if entry.busy == 0 and not entry.closed:
            self._idle(entry)[entry] = asyncio.get_running_loop().time()

    def closed(self, entry: _Connection) -> None:
        if entry.closed:
            return
        entry.closed = True
        self.open -= 1
        if entry.admitted:
            self.admitted -= 1
        self._idle(entry).pop(entry, None)
        self._by_handler.pop(entry.handler, None)
        self._room.set()


class _CountedProtocol(asyncio.Protocol):
    """aiohttp's protocol for one connection, telling the table when it is made,
    receives and is lost: aiohttp has no hook for a connection's end."""

    def __init__(self, table: ConnectionTable, entry: _Connection, inner: Any) -> None:
        self._table, self._entry, self._inner = table, entry, inner

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._inner.connection_made(transport)
        self._table.made(self._entry, self._inner)

    def data_received(self, data: bytes) -> None:
        self._table.received(self._entry)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()  # type: ignore[no-any-return]

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self._inner.connection_lost(exc)
        finally:
            self._table.closed(self._entry)


def _margin(limit: int) -> int:
    """Sockets a ConnectionTable holds past its limit, to answer them 503."""
    return max(8, limit // 16)


def default_max_connections(io_threads: int) -> int:
    """The connections RLIMIT_NOFILE leaves room for: the soft limit less
    RESERVED_FDS and FDS_PER_IO_THREAD per I/O thread, less the table's 503
    margin, between MIN_CONNECTIONS and MAX_DEFAULT_CONNECTIONS."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 30
    budget = soft - RESERVED_FDS - FDS_PER_IO_THREAD * io_threads
    limit = min(budget - 8, budget * 16 // 17)  # the largest with limit + _margin(limit) <= budget
    return max(MIN_CONNECTIONS, min(MAX_DEFAULT_CONNECTIONS, limit))


CONNECTIONS_KEY = web.AppKey("connections", ConnectionTable)
THROTTLE_KEY = web.AppKey("throttle", AuthThrottle)


def _needs_token(request: web.Request) -> bool:
    return request.path.startswith("/v1/") or (
        request.path == "/metrics" and bool(request.app[METRICS_TOKEN_KEY]))


def _limits_middleware() -> Any:
    """The connection table's 503 and the failed-authentication throttle's 429."""

    @web.middleware
    async def limit(request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        table = request.app.get(CONNECTIONS_KEY)  # none under a test server
        entry = table.started(request.protocol) if table is not None else None
        served = False
        try:
            if entry is not None and not entry.admitted:
                limited_log.warning("full", "connection table full (%d connections, none idle): "
                                    "answering 503", table.limit)  # type: ignore[union-attr]
                return _refusal(503, "unavailable", "the agent's connection table is full")
            if not _needs_token(request):
                return await handler(request)
            response = await _through_throttle(request, handler)
            served = response.status == 200
            return response
        finally:
            if entry is not None:
                table.finished(entry, served)  # type: ignore[union-attr]

    return limit


async def _through_throttle(request: web.Request,
                           handler: Callable[..., Any]) -> web.StreamResponse:
    """handler(request), unless the client's address is throttled (429); the
    answer settles the address's budget."""
    throttle = request.app[THROTTLE_KEY]
    client, token = client_key(request.remote), _bearer(request)
    charged, wait = throttle.admit(client, token)
    if wait is not None:
        limited_log.warning("throttled", "too many failed authentications from %s: "
                            "answering 429", client)
        return _refusal(429, "throttled", "too many failed authentications from this address; "
                        "check the token", retry_after_s=max(1, math.ceil(wait)))
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:  # aiohttp's own answers: unknown route, bad method
        status = exc.status
        raise
    finally:
        throttle.settle(client, token, status, charged)


def make_app(config: FluxonFsConfig, threads: int = 32, inject_latency_ms: float = 0.0, *,
             metrics_token: str | None = None) -> web.Application:
    """The agent's aiohttp app; ``metrics_token`` makes /metrics ask for that bearer token."""
    if inject_latency_ms < 0:
        raise errors.FluxonFsConfigError(f"inject_latency_ms must be >= 0, got {inject_latency_ms}")
    if not isinstance(threads, int) or threads < 1:
        raise errors.FluxonFsConfigError(f"io threads must be an int >= 1, got {threads!r}")
    if metrics_token is not None:
        check_strength(metrics_token, "the metrics token")
    config.check_served(config.exports.values())
    metrics = AgentMetrics(threads)
    # The metrics middleware is outermost: latency includes any injected delay, and
    # the limits' 429 and 503 are counted.
    middlewares = [_metrics_middleware(metrics), _limits_middleware()]
    if inject_latency_ms:
        middlewares.append(_latency_middleware(inject_latency_ms / 1e3))
    app = web.Application(middlewares=middlewares)
    app[STORAGE_KEY] = ReloadableStorage(ExportStorage(config))
    app[POOL_KEY] = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="agent-io")
    app[METRICS_KEY] = metrics
    app[METRICS_TOKEN_KEY] = _sha256(metrics_token) if metrics_token is not None else b""
    app[THROTTLE_KEY] = AuthThrottle()
    app.router.add_get("/v1/stat", handle_stat)
    app.router.add_get("/v1/read", handle_read)
    app.router.add_get("/v1/list", handle_list)
    app.router.add_get("/healthz", handle_health)
    app.router.add_get("/metrics", handle_metrics)

    async def log_shutdown(app: web.Application) -> None:
        # Called on SIGTERM/SIGINT once the agent stopped listening and aiohttp closed
        # idle keep-alive connections; it then waits for the requests in flight to finish.
        log.info("shutting down: no new connections; %d request(s) in flight will finish",
                 app[METRICS_KEY].active)

    async def shutdown_pool(app: web.Application) -> None:
        # Cleanup runs after the requests in flight finished (or the shutdown timeout
        # cancelled them), so no handler waits on the pool any more: drop queued work and
        # wait for reads already running in a thread (they cannot be interrupted).
        await asyncio.to_thread(app[POOL_KEY].shutdown, wait=True, cancel_futures=True)
        log.info("stopped")

    app.on_shutdown.append(log_shutdown)
    app.on_cleanup.append(shutdown_pool)
    return app


def make_ssl_context(tls_cert: str | os.PathLike[str] | None,
                     tls_key: str | os.PathLike[str] | None) -> ssl.SSLContext | None:
    """The server's TLS context from a PEM certificate chain and its key; None without both.

    Raises FluxonFsConfigError when only one is given, a file is missing, or the
    pair does not load (not PEM, key not matching, key with a passphrase).
    """
    if tls_cert is None and tls_key is None:
        return None
    if tls_cert is None or tls_key is None:
        given, missing = ("--tls-cert", "--tls-key") if tls_key is None else ("--tls-key", "--tls-cert")
        raise errors.FluxonFsConfigError(f"{given} needs {missing}: HTTPS takes a certificate "
                                         "and its private key")
    for what, path in (("--tls-cert", tls_cert), ("--tls-key", tls_key)):
        if not os.path.isfile(path):
            raise errors.FluxonFsConfigError(f"{what} {os.fspath(path)!r} is not a file")

    def no_passphrase() -> bytes:
        raise errors.FluxonFsConfigError(f"--tls-key {os.fspath(tls_key)!r} is encrypted; the "
                                         "agent needs an unencrypted key (readable by its user only)")

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= ssl.OP_NO_RENEGOTIATION
    try:
        context.load_cert_chain(tls_cert, tls_key, password=no_passphrase)
    except errors.FluxonFsConfigError:
        raise
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise errors.FluxonFsConfigError(
            f"cannot load the TLS certificate {os.fspath(tls_cert)!r} with the key "
            f"{os.fspath(tls_key)!r} (both must be PEM, the key the certificate's): {exc}") from None
    return context


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise errors.FluxonFsConfigError(f"--listen must be HOST:PORT, got {listen!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def run_agent(config: FluxonFsConfig, listen: str, threads: int = 32,
              access_log: bool = False, inject_latency_ms: float = 0.0, *,
              tls_cert: str | os.PathLike[str] | None = None,
              tls_key: str | os.PathLike[str] | None = None,
              shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
              config_path: str | os.PathLike[str] | None = None,
              max_connections: int | None = None,
              header_timeout_s: float = HEADER_TIMEOUT_S,
              keepalive_timeout_s: float = KEEPALIVE_TIMEOUT_S,
              metrics_token: str | None = None) -> None:
    """Serve until SIGINT/SIGTERM, over HTTPS when ``tls_cert`` and ``tls_key`` are given.

    SIGTERM and SIGINT are a graceful exit: the listener closes, idle
    keep-alive connections are closed, requests in flight get up to
    ``shutdown_timeout_s`` to finish, then the I/O pool is shut down. SIGHUP
    reloads ``config_path`` (default: the file ``config`` was read from) and
    serves it from then on, without dropping a connection; a file that does
    not load or check is refused and logged, the config in use kept.

    ``max_connections`` (default: what RLIMIT_NOFILE leaves room for, see
    :func:`default_max_connections`), ``header_timeout_s`` and
    ``keepalive_timeout_s`` bound the connections (see ConnectionTable).
    ``metrics_token`` (default: ``$FLUXON_METRICS_TOKEN``) makes /metrics ask
    for that bearer token; without one, /metrics is open.
    """
    host, port = parse_listen(listen)
    ssl_context = make_ssl_context(tls_cert, tls_key)
    if metrics_token is None:
        metrics_token = os.environ.get(METRICS_TOKEN_ENV) or None
    if not keepalive_timeout_s > 0:
        raise errors.FluxonFsConfigError(
            f"the keep-alive timeout must be > 0 s, got {keepalive_timeout_s!r}")
    app = make_app(config, threads, inject_latency_ms, metrics_token=metrics_token)
    table = _connection_table(app, max_connections, threads, header_timeout_s)
    if config_path is None and config.source:
        config_path = config.source
    scheme = "https" if ssl_context is not None else "http"
    exports = ", ".join(f"{e.name}={e.root}" for e in config.exports.values()) or "none"
    if ssl_context is None and not _is_loopback(host):
        log.warning("serving plain HTTP on %s: bearer tokens and file bytes cross the network "
                    "in clear; use --tls-cert and --tls-key off loopback", host)
    listener = bind(host, port)  # before saying so: a port in use is an error, not a traceback
    print(f"fluxon-video agent listening on {scheme}://{host}:{port} (exports: {exports})",
          flush=True)
    log.info("at most %d connections, %.0f s for a request's headers, %.0f s idle keep-alive; "
             "/metrics %s", table.limit, header_timeout_s, keepalive_timeout_s,
             "needs its token" if metrics_token else "is open")
    asyncio.run(_serve(app, listener, ssl_context, table,
                       os.fspath(config_path) if config_path is not None else None,
                       access_log=access_log, keepalive_timeout_s=keepalive_timeout_s,
                       shutdown_timeout_s=shutdown_timeout_s))


def _connection_table(app: web.Application, max_connections: int | None, threads: int,
                      header_timeout_s: float) -> ConnectionTable:
    """The app's ConnectionTable, its metrics wired."""
    metrics = app[METRICS_KEY]
    limit = max_connections if max_connections is not None else default_max_connections(threads)
    table = ConnectionTable(limit, header_timeout_s,
                            on_close=lambda reason: metrics.connections_closed.labels(reason).inc())
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = table.cap + RESERVED_FDS + FDS_PER_IO_THREAD * threads
    if soft != resource.RLIM_INFINITY and needed > soft:
        log.warning("%d connections and %d I/O threads may need %d descriptors, more than "
                    "RLIMIT_NOFILE (%d): raise it (systemd: LimitNOFILE=) or lower the "
                    "connection limit; out of descriptors, requests are answered 503",
                    table.limit, threads, needed, soft)
    metrics.connections.set_function(lambda: table.open)
    metrics.connections_limit.set(table.limit)
    app[CONNECTIONS_KEY] = table
    return table


async def _serve(app: web.Application, listener: socket.socket,
                 ssl_context: ssl.SSLContext | None, table: ConnectionTable,
                 config_path: str | None, *, access_log: bool, keepalive_timeout_s: float,
                 shutdown_timeout_s: float) -> None:
    """Serve app on listener until SIGTERM/SIGINT; SIGHUP reloads config_path.

    aiohttp's AppRunner without its sites: the ConnectionTable accepts the
    connections. Shutting down is run_app's order: stop listening, then
    runner.cleanup() (idle connections closed, requests in flight finish).
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    reloads = _Reloads(app, config_path)
    loop.add_signal_handler(signal.SIGHUP, reloads.request)
    runner = web.AppRunner(app, handle_signals=False, access_log=log if access_log else None,
                           keepalive_timeout=keepalive_timeout_s,
                           shutdown_timeout=shutdown_timeout_s)
    await runner.setup()
    assert runner.server is not None
    accepting = asyncio.create_task(table.serve(listener, runner.server, ssl_context))
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({accepting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        accepting.cancel()
        stopping.cancel()
        await asyncio.wait({accepting, stopping})
        listener.close()  # new connections are refused from here on
        await runner.cleanup()
    if not accepting.cancelled():
        accepting.result()  # the accept loop ended on an error: raise it (exit 1)


class _Reloads:
    """SIGHUP: reload the config file, one reload at a time, in the order asked."""

    def __init__(self, app: web.Application, config_path: str | None) -> None:
        self.app, self.config_path = app, config_path
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[bool]] = set()

    def request(self) -> None:
        if self.config_path is None:
            log.warning("SIGHUP: no config file to reload (the agent was given a config "
                        "object); still serving the same config")
            return
        log.info("SIGHUP: reloading %s", self.config_path)
        task = asyncio.get_running_loop().create_task(self._reload(self.config_path))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reload(self, path: str) -> bool:
        async with self._lock:
            return await reload_config(self.app, path)


def _load_storage(path: str) -> ExportStorage:
    """The storage of the config file at path, checked as at start-up."""
    config = load_config(path)
    config.check_served(config.exports.values())
    return ExportStorage(config)


async def reload_config(app: web.Application, path: str | os.PathLike[str]) -> bool:
    """Serve the config file at path from now on (what SIGHUP does); False if refused.

    A file that does not load or check (bad TOML, a weak token, a missing
    root, an unknown identity in an allow list) is refused, the reason logged,
    and the config in use kept: a typo never takes the agent down.
    """
    try:
        storage = await asyncio.to_thread(_load_storage, os.fspath(path))
    except errors.FluxonFsConfigError as exc:
        log.error("reload refused, still serving the previous config: %s", exc)
        return False
    except Exception as exc:  # noqa: BLE001 - whatever fails, the agent keeps serving
        log.error("reload of %s failed, still serving the previous config: %r", path, exc,
                  exc_info=exc)
        return False
    app[STORAGE_KEY].current = storage
    app[THROTTLE_KEY].forget_tokens()
    exports = ", ".join(sorted(storage.config.exports)) or "none"
    log.info("reloaded %s: exports %s; %d identities", path, exports,
             len(storage.config.identities))
    return True


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or FluxonFsConfigError naming the address."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        raise errors.FluxonFsConfigError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock
