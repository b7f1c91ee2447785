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
    GET /metrics                                      -> Prometheus text format (no token)

Errors are JSON ``{"error": kind, "message": text}`` with status 400 (bad
request), 401/403 (permission), 404 (not found), 409 (file changed), 500
(internal). With a certificate and key the agent serves HTTPS; SIGTERM and
SIGINT stop it gracefully (no new connections, requests in flight finish).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram,
                               PlatformCollector, ProcessCollector, generate_latest)

from fluxon_video import errors
from fluxon_video.fs.config import FluxonFsConfig
from fluxon_video.fs.origin import FileStat
from fluxon_video.fs.storage import ExportStorage

log = logging.getLogger("fluxon_video.agent")

# Most specific first: FileNotFoundError-derived classes before their bases.
ERROR_STATUS: list[tuple[type[BaseException], int, str]] = [
    (errors.FluxonFsBadRequestError, 400, "bad_request"),
    (errors.FluxonFsPermissionError, 403, "permission"),
    (errors.FluxonFsNotFoundError, 404, "not_found"),
    (errors.FluxonFsFileChangedError, 409, "changed"),
    (errors.FluxonFsShortReadError, 409, "changed"),
]

# The error kinds the agent answers with: the reasons of fluxon_agent_refusals_total.
REFUSAL_REASONS = ("bad_request", "permission", "not_found", "changed", "internal")
# Request latency buckets (seconds): a page read from local disk takes well under a
# millisecond, one from a network file system or with injected latency much longer.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0)
# On SIGTERM/SIGINT, how long requests in flight get to finish before they are cancelled.
SHUTDOWN_TIMEOUT_S = 60.0
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
        for reason in REFUSAL_REASONS:
            self.refusals.labels(reason)  # every reason is exported from the start, at 0
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


STORAGE_KEY = web.AppKey("storage", ExportStorage)
POOL_KEY = web.AppKey("pool", concurrent.futures.ThreadPoolExecutor)
METRICS_KEY = web.AppKey("metrics", AgentMetrics)


def _error_response(exc: BaseException, request: web.Request) -> web.Response:
    for cls, status, kind in ERROR_STATUS:
        if isinstance(exc, cls):
            if status == 403 and "token" in str(exc):
                status = 401
            response = web.json_response({"error": kind, "message": str(exc)}, status=status)
            break
    else:
        # Details stay in the agent's log: an unexpected error's text may name host paths.
        log.error("internal error in %s (export %r, path %r): %s", request.path,
                  request.query.get("export"), request.query.get("path"), exc, exc_info=exc)
        kind = "internal"
        response = web.json_response(
            {"error": kind, "message": "internal error (see the agent's log)"}, status=500)
    response[_REFUSAL] = kind
    return response


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
    return web.Response(body=request.app[METRICS_KEY].exposition(),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})


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


def make_app(config: FluxonFsConfig, threads: int = 32,
             inject_latency_ms: float = 0.0) -> web.Application:
    if inject_latency_ms < 0:
        raise errors.FluxonFsConfigError(f"inject_latency_ms must be >= 0, got {inject_latency_ms}")
    if not isinstance(threads, int) or threads < 1:
        raise errors.FluxonFsConfigError(f"io threads must be an int >= 1, got {threads!r}")
    config.check_served(config.exports.values())
    metrics = AgentMetrics(threads)
    # The metrics middleware is outermost: latency includes any injected delay.
    middlewares = [_metrics_middleware(metrics)]
    if inject_latency_ms:
        middlewares.append(_latency_middleware(inject_latency_ms / 1e3))
    app = web.Application(middlewares=middlewares)
    app[STORAGE_KEY] = ExportStorage(config)
    app[POOL_KEY] = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="agent-io")
    app[METRICS_KEY] = metrics
    app.router.add_get("/v1/stat", handle_stat)
    app.router.add_get("/v1/read", handle_read)
    app.router.add_get("/v1/list", handle_list)
    app.router.add_get("/healthz", handle_health)
    app.router.add_get("/metrics", handle_metrics)

    async def log_shutdown(app: web.Application) -> None:
        # aiohttp calls this on SIGTERM/SIGINT after it stopped listening and closed idle
        # keep-alive connections; it then waits for the requests in flight to finish.
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
              shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S) -> None:
    """Serve until SIGINT/SIGTERM, over HTTPS when ``tls_cert`` and ``tls_key`` are given.

    SIGTERM and SIGINT are a graceful exit (aiohttp): the listener closes, idle
    keep-alive connections are closed, requests in flight get up to
    ``shutdown_timeout_s`` to finish, then the I/O pool is shut down.
    """
    host, port = parse_listen(listen)
    ssl_context = make_ssl_context(tls_cert, tls_key)
    app = make_app(config, threads, inject_latency_ms)
    scheme = "https" if ssl_context is not None else "http"
    exports = ", ".join(f"{e.name}={e.root}" for e in config.exports.values()) or "none"
    if ssl_context is None and not _is_loopback(host):
        log.warning("serving plain HTTP on %s: bearer tokens and file bytes cross the network "
                    "in clear; use --tls-cert and --tls-key off loopback", host)
    listener = bind(host, port)  # before saying so: a port in use is an error, not a traceback
    print(f"fluxon-video agent listening on {scheme}://{host}:{port} (exports: {exports})",
          flush=True)
    web.run_app(app, sock=listener, print=None, ssl_context=ssl_context,
                shutdown_timeout=shutdown_timeout_s,
                access_log=log if access_log else None, handle_signals=True)


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
