"""The FluxonFS agent: serves stat and read_chunk for export roots over HTTP/1.1.

    fluxon-video agent --config agent.toml --listen 0.0.0.0:8765

Built on aiohttp (asyncio, HTTP/1.1 keep-alive, maintained, small): the agent
is I/O-bound and serves many training processes at once, so one event loop
with file reads in a thread pool is the right shape; it never decodes video
and never reads more of a file than the range asked for.

Protocol (every request carries ``Authorization: Bearer <token>``):

    GET /v1/stat?export=E&path=P
        -> {"size": N, "mtime_ns": T, "ctime_ns": C, "inode": I}
    GET /v1/read?export=E&path=P&offset=O&length=L&size=N&mtime_ns=T&ctime_ns=C&inode=I
        -> bytes
    GET /healthz                                      -> "ok"

Errors are JSON ``{"error": kind, "message": text}`` with status 400 (bad
request), 401/403 (permission), 404 (not found), 409 (file changed).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from fluxon_video import errors
from fluxon_video.fs.config import FluxonFsConfig
from fluxon_video.fs.storage import ExportStorage, FileStat

log = logging.getLogger("fluxon_video.agent")

# Most specific first: FileNotFoundError-derived classes before their bases.
ERROR_STATUS: list[tuple[type[BaseException], int, str]] = [
    (errors.FluxonFsBadRequestError, 400, "bad_request"),
    (errors.FluxonFsPermissionError, 403, "permission"),
    (errors.FluxonFsNotFoundError, 404, "not_found"),
    (errors.FluxonFsFileChangedError, 409, "changed"),
    (errors.FluxonFsShortReadError, 409, "changed"),
]

STORAGE_KEY = web.AppKey("storage", ExportStorage)
POOL_KEY = web.AppKey("pool", concurrent.futures.ThreadPoolExecutor)


def _error_response(exc: BaseException) -> web.Response:
    for cls, status, kind in ERROR_STATUS:
        if isinstance(exc, cls):
            if status == 403 and "token" in str(exc):
                status = 401
            return web.json_response({"error": kind, "message": str(exc)}, status=status)
    # Details stay in the agent's log: an unexpected error's text may name host paths.
    log.error("internal error: %s", exc, exc_info=exc)
    return web.json_response({"error": "internal", "message": "internal error (see the agent's log)"},
                             status=500)


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
    return await asyncio.get_running_loop().run_in_executor(request.app[POOL_KEY], fn, *args)


async def handle_stat(request: web.Request) -> web.Response:
    try:
        st = await _in_pool(request, request.app[STORAGE_KEY].stat,
                            _str_param(request, "export"), _str_param(request, "path"),
                            _bearer(request))
    except Exception as exc:  # noqa: BLE001 - every error becomes a status
        return _error_response(exc)
    return web.json_response({"size": st.size, "mtime_ns": st.mtime_ns, "ctime_ns": st.ctime_ns,
                              "inode": st.inode, "is_file": True})


async def handle_read(request: web.Request) -> web.Response:
    try:
        expected = FileStat(_int_param(request, "size"), _int_param(request, "mtime_ns"),
                            _int_param(request, "ctime_ns"), _int_param(request, "inode"))
        data = await _in_pool(request, request.app[STORAGE_KEY].read_chunk,
                              _str_param(request, "export"), _str_param(request, "path"),
                              _int_param(request, "offset"), _int_param(request, "length"),
                              expected, _bearer(request))
    except Exception as exc:  # noqa: BLE001
        return _error_response(exc)
    return web.Response(body=data, content_type="application/octet-stream")


async def handle_health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


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
    config.check_served(config.exports.values())
    app = web.Application(middlewares=[_latency_middleware(inject_latency_ms / 1e3)]
                          if inject_latency_ms else [])
    app[STORAGE_KEY] = ExportStorage(config)
    app[POOL_KEY] = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="agent-io")
    app.router.add_get("/v1/stat", handle_stat)
    app.router.add_get("/v1/read", handle_read)
    app.router.add_get("/healthz", handle_health)

    async def shutdown_pool(app: web.Application) -> None:
        app[POOL_KEY].shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(shutdown_pool)
    return app


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise errors.FluxonFsConfigError(f"--listen must be HOST:PORT, got {listen!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def run_agent(config: FluxonFsConfig, listen: str, threads: int = 32,
              access_log: bool = False, inject_latency_ms: float = 0.0) -> None:
    """Serve until SIGINT/SIGTERM (aiohttp turns both into a graceful exit)."""
    host, port = parse_listen(listen)
    exports = ", ".join(f"{e.name}={e.root}" for e in config.exports.values()) or "none"
    print(f"fluxon-video agent listening on http://{host}:{port} (exports: {exports})", flush=True)
    web.run_app(make_app(config, threads, inject_latency_ms), host=host, port=port, print=None,
                access_log=log if access_log else None, handle_signals=True)
