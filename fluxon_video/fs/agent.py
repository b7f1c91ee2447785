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
    GET /v1/stat?export=E&path=P&head=L
        -> that JSON with "head": H on one line, then the version's first H bytes
           (H = min(L, N)): a cold open's stat and first piece in one round trip
    GET /v1/read?export=E&path=P&offset=O&length=L&size=N&mtime_ns=T&ctime_ns=C&inode=I
        -> bytes
    GET /v1/list?export=E&prefix=P&recursive=1&pattern=G&cursor=C&limit=N
        -> {"entries": [{"relpath", "size", "mtime_ns", "is_dir"}], "next": C or null}
    GET /healthz                                      -> "ok" (no token)
    GET /metrics                                      -> Prometheus text format (a token
                                                         only with ``metrics_token``)

Errors are JSON ``{"error": kind, "message": text}`` with status 400 (bad
request), 401/403 (permission), 404 (not found), 409 (file changed), 429 (too
many failed authentications from the client's address), 500 (internal), 502
(io: the object store behind the export failed or is unreachable; 500 when it
refused the request for good), 503 (the agent cannot take the request now: its
connection table is full, the host is out of descriptors or memory, or the
object store is throttling), 504 (timeout: the object store did not answer in
time); 429 and 503 carry Retry-After. With a
certificate and key the agent serves HTTPS (TLS 1.2 with AEAD suites, or
1.3); SIGTERM and SIGINT stop it gracefully (no new connections, requests in
flight finish); SIGHUP reloads the config file (identities and exports)
without dropping a connection.

What bounds clients (the connection table, the failed-authentication
throttle) is fs/agent_limits.py; the Prometheus metrics, fs/agent_metrics.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import ipaddress
import json
import logging
import math
import os
import resource
import signal
import socket
import ssl
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from fluxon_video import errors
from fluxon_video.fs.agent_limits import (FDS_PER_IO_THREAD, HEADER_TIMEOUT_S, RESERVED_FDS,
                                          AuthThrottle, ConnectionTable, client_key,
                                          default_max_connections)
from fluxon_video.fs.agent_metrics import (REFUSAL_KIND_KEY, SERVED_BYTES_KEY, AgentMetrics,
                                           metrics_middleware)
from fluxon_video.fs.config import FluxonFsConfig, load_config
from fluxon_video.fs.listing import FluxonFsFileEntry
from fluxon_video.fs.object_origin import is_store_fault
from fluxon_video.fs.origin import FileStat
from fluxon_video.fs.paths import EXHAUSTED_ERRNOS
from fluxon_video.fs.storage import ExportStorage
from fluxon_video.fs.tokens import check_strength, token_sha256
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
    # The object store behind the export: it did not answer in time (504), or it
    # failed or cannot be reached (502; 500 when it refused the request for good:
    # a client waits out a 502 or 504, not a 500). Only its origin raises these.
    (errors.FluxonFsTimeoutError, 504, "timeout"),
    (errors.FluxonFsIOError, 502, "io"),
]

# What a 429 or 503 asks a client to wait at least (seconds): connections and
# descriptors free up as fast as requests end.
RETRY_AFTER_S = 1
# On SIGTERM/SIGINT, how long requests in flight get to finish before they are cancelled.
SHUTDOWN_TIMEOUT_S = 60.0
# An idle keep-alive connection is closed after this (aiohttp's run_app default).
KEEPALIVE_TIMEOUT_S = 75.0
# The bearer token /metrics asks for, when run_agent is not given one.
METRICS_TOKEN_ENV = "FLUXON_METRICS_TOKEN"
# TLS 1.2 suites: forward secrecy and AEAD only (no CBC, no RSA key exchange).
# TLS 1.3's suites are all AEAD and not affected by set_ciphers.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL"


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

    def stat_head(self, export_name: str, relpath: str, length: int,
                  token: str | None) -> tuple[FileStat, bytes]:
        return self.current.stat_head(export_name, relpath, length, token)

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
CONNECTIONS_KEY = web.AppKey("connections", ConnectionTable)
THROTTLE_KEY = web.AppKey("throttle", AuthThrottle)


def _refusal(status: int, kind: str, message: str,
             retry_after_s: int = RETRY_AFTER_S) -> web.Response:
    """An error answer: JSON with its kind (which the metrics count)."""
    response = web.json_response({"error": kind, "message": message}, status=status)
    response[REFUSAL_KIND_KEY] = kind
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
            if status == 502 and getattr(exc, "lasting", False):
                status = 500
            if is_store_fault(exc):
                # One line per export and kind every 10 s, whatever the number of
                # requests failing alike (exports are the config's: authorised).
                export = request.query.get("export", "")
                limited_log.warning(f"store {export} {status}", "export %r: answering %d "
                                    "(%s) to %s: %s", export, status, kind, request.path, exc)
            elif status == 503:
                limited_log.warning("unavailable", "answering 503 to %s: %s", request.path, exc)
            elif status == 401:
                _log_refused_token(request, exc)
            retry_after = getattr(exc, "retry_after_s", None)
            return _refusal(status, kind, str(exc),
                            max(RETRY_AFTER_S, math.ceil(retry_after or 0)))
    # Details stay in the agent's log: an unexpected error's text may name host paths.
    log.error("internal error in %s (export %r, path %r): %s", request.path,
              request.query.get("export"), request.query.get("path"), exc, exc_info=exc)
    return _refusal(500, "internal", "internal error (see the agent's log)")


def _log_refused_token(request: web.Request, exc: BaseException) -> None:
    """One line (rate-limited) for a request whose token no identity has: the
    export asked for and the client's address, never the token."""
    export = request.query.get("export", "")[:100]
    sent = _bearer(request) is not None
    limited_log.warning("refused token", "refused %s for export %r from %s (%s; %s)",
                        "a token" if sent else "a request without a token", export,
                        request.remote, "no identity has it" if sent else "it sent none",
                        request.path)


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
    storage = request.app[STORAGE_KEY]
    try:
        export, path = _str_param(request, "export"), _str_param(request, "path")
        if "head" in request.query:
            st, head = await _in_pool(request, storage.stat_head, export, path,
                                      _int_param(request, "head"), _bearer(request))
        else:
            st, head = await _in_pool(request, storage.stat, export, path, _bearer(request)), None
    except Exception as exc:  # noqa: BLE001 - every error becomes a status
        return _error_response(exc, request)
    fields = {**st.as_fields(), "is_file": True}
    if head is None:
        return web.json_response(fields)
    # One line of JSON, then the bytes (the stat's "head" says how many).
    response = web.Response(body=json.dumps({**fields, "head": len(head)}).encode() + b"\n" + head,
                            content_type="application/octet-stream")
    response[SERVED_BYTES_KEY] = len(head)
    return response


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


def _token_matches(token: str | None, expected_sha256: bytes) -> bool:
    """Constant time: digests of equal length, whatever the token's length."""
    return token is not None and hmac.compare_digest(token_sha256(token), expected_sha256)


def _latency_middleware(seconds: float) -> Any:
    """Delay every stat and read answer by ``seconds`` (models a remote store in benchmarks)."""

    @web.middleware
    async def delay(request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        if request.path in ("/v1/read", "/v1/stat"):
            await asyncio.sleep(seconds)
        return await handler(request)

    return delay


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
    middlewares = [metrics_middleware(metrics), _limits_middleware()]
    if inject_latency_ms:
        middlewares.append(_latency_middleware(inject_latency_ms / 1e3))
    app = web.Application(middlewares=middlewares)
    app[STORAGE_KEY] = ReloadableStorage(ExportStorage(config))
    app[POOL_KEY] = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="agent-io")
    app[METRICS_KEY] = metrics
    app[METRICS_TOKEN_KEY] = token_sha256(metrics_token) if metrics_token is not None else b""
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
    _probe_stores(app[STORAGE_KEY].current, config.exports.values())
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


def _probe_stores(storage: ExportStorage, exports: Any) -> None:
    """Ask each object-store export's store once (ExportStorage.probe_stores): a
    missing bucket or refused credentials refuse the start (FluxonFsConfigError);
    a store that does not answer now is served anyway, with an error logged: the
    agent's other exports, and this one once its store is back, keep serving."""
    for probe in storage.probe_stores(exports):
        log.error("export %r (%s): its store did not answer as it should at start: %s; "
                  "serving it anyway, its requests fail until the store answers",
                  probe.export.name, probe.export.root, probe.reason)


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


def _load_storage(path: str, serving: FluxonFsConfig | None = None) -> ExportStorage:
    """The storage of the config file at path, checked as at start-up (the stores
    of exports new or changed since ``serving``, the config in use, are probed)."""
    config = load_config(path)
    config.check_served(config.exports.values())
    storage = ExportStorage(config)
    kept = serving.exports if serving is not None else {}
    _probe_stores(storage, [e for e in config.exports.values() if kept.get(e.name) != e])
    return storage


async def reload_config(app: web.Application, path: str | os.PathLike[str]) -> bool:
    """Serve the config file at path from now on (what SIGHUP does); False if refused.

    A file that does not load or check (bad TOML, a weak token, a missing
    root, an unknown identity in an allow list) is refused, the reason logged,
    and the config in use kept: a typo never takes the agent down.
    """
    try:
        storage = await asyncio.to_thread(_load_storage, os.fspath(path),
                                          app[STORAGE_KEY].current.config)
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
