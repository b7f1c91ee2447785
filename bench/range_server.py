#!/usr/bin/env python3
"""The remote-store model of bench/matrix.py's remote suites: an HTTP Range server, a
delaying and counting proxy, and a shaping relay (see --help or bench/README.md)."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import socket
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from harness import tool_parser

CHUNK = 64 * 1024
BURST = 64 * 1024  # token bucket depth, bytes


class Model:
    """The knobs of the store model; changeable at run time through /set."""

    def __init__(self, latency_ms: float, bandwidth_mbps: float) -> None:
        self.latency_s = latency_ms / 1e3
        self.rate = bandwidth_mbps * 1e6  # bytes/s; 0 = unlimited

    def as_dict(self) -> dict:
        return {"latency_ms": self.latency_s * 1e3, "bandwidth_mbps": self.rate / 1e6}


class TokenBucket:
    """One connection's server -> client budget: ``model.rate`` bytes/s, BURST deep."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.tokens = float(BURST)
        self.t = time.monotonic()

    async def take(self, n: int) -> None:
        rate = self.model.rate
        if not rate:
            return
        now = time.monotonic()
        self.tokens = min(BURST, self.tokens + (now - self.t) * rate) - n
        self.t = now
        if self.tokens < 0:
            await asyncio.sleep(-self.tokens / rate)


class Relay:
    """TCP relay: shapes server -> client per connection, counts connections and bytes."""

    def __init__(self, model: Model, upstream: tuple[str, int], registry: CollectorRegistry) -> None:
        self.model, self.upstream, self.ids = model, upstream, itertools.count()
        self.used: set[int] = set()
        self.opened = Counter("bench_relay_connections_opened", "client connections accepted",
                              registry=registry)
        Gauge("bench_relay_connections_used", "connections that carried a request since the "
              "last /reset", registry=registry).set_function(lambda: len(self.used))
        self.down = Counter("bench_relay_bytes_down", "bytes relayed server -> client",
                            registry=registry)

    async def handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        conn = next(self.ids)
        self.opened.inc()
        _nodelay(cwriter)
        try:
            ureader, uwriter = await asyncio.open_connection(*self.upstream)
        except OSError:
            cwriter.close()
            return
        _nodelay(uwriter)
        bucket = TokenBucket(self.model)

        async def client_to_server() -> None:
            while data := await creader.read(CHUNK):
                self.used.add(conn)
                uwriter.write(data)
                await uwriter.drain()

        async def server_to_client() -> None:
            while data := await ureader.read(CHUNK):
                await bucket.take(len(data))
                cwriter.write(data)
                await cwriter.drain()
                self.down.inc(len(data))

        tasks = [asyncio.ensure_future(client_to_server()),
                 asyncio.ensure_future(server_to_client())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for writer in (uwriter, cwriter):
                writer.close()


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


# ---- the origins: the Range server (--root) and the proxy (--proxy) ----

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
              "trailer", "trailers", "transfer-encoding", "upgrade"}


def end_to_end(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers a proxy passes on (RFC 9110 7.6.1: not the hop-by-hop ones)."""
    return [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP]


def origin_app(root: Path | None, upstream: str | None, model: Model,
               registry: CollectorRegistry) -> web.Application:
    """Sleeps the model's latency before answering each request, then serves a file of
    ``root`` (aiohttp's FileResponse: GET with or without a Range, HEAD; 206/200/416/404)
    or forwards the request to ``upstream`` and streams the answer back; counts requests
    by method and status, and the body bytes of GET answers."""
    import aiohttp

    requests = Counter("bench_range_requests", "requests answered, by method and status",
                       ["method", "status"], registry=registry)
    served = Counter("bench_range_served_bytes", "body bytes of GET responses",
                     registry=registry)
    app = web.Application(client_max_size=1 << 30)

    async def session(app: web.Application) -> Any:
        app["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                               auto_decompress=False)
        yield
        await app["session"].close()

    async def count(request: web.Request, response: web.StreamResponse) -> None:
        requests.labels(request.method, str(response.status)).inc()
        if request.method == "GET":  # a file's body length is known when it is prepared
            served.inc(response.get("served", response.content_length or 0))

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        async with request.app["session"].request(
                request.method, upstream + request.rel_url.raw_path_qs,
                headers=end_to_end(request.headers.items()), data=body or None,
                allow_redirects=False) as answer:
            response = web.StreamResponse(status=answer.status, reason=answer.reason)
            for k, v in end_to_end(answer.headers.items()):
                response.headers.add(k, v)
            await response.prepare(request)
            response["served"] = 0
            async for chunk in answer.content.iter_chunked(CHUNK):
                response["served"] += len(chunk)
                await response.write(chunk)
            await response.write_eof()
        await count(request, response)
        return response

    async def handle(request: web.Request) -> web.StreamResponse:
        if model.latency_s:
            await asyncio.sleep(model.latency_s)
        if root is None:
            return await forward(request)
        path = (root / request.match_info["path"]).resolve()
        if root not in path.parents or not path.is_file():
            return web.Response(status=404, text="not found")
        return web.FileResponse(path)

    if root is not None:
        root = root.resolve()
        app.router.add_get("/{path:.+}", handle)  # allow_head: HEAD too
        app.on_response_prepare.append(count)
    else:
        app.cleanup_ctx.append(session)
        app.router.add_route("*", "/{path:.*}", handle)
    return app


# ---- control ----

def control_app(model: Model, relay: Relay, registry: CollectorRegistry) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry),
                            headers={"Content-Type": "text/plain; version=0.0.4"})

    async def reset(request: web.Request) -> web.Response:
        relay.used.clear()
        return web.json_response({"ok": True})

    async def set_model(request: web.Request) -> web.Response:
        if "latency_ms" in request.query:
            model.latency_s = float(request.query["latency_ms"]) / 1e3
        if "bandwidth_mbps" in request.query:
            model.rate = float(request.query["bandwidth_mbps"]) * 1e6
        return web.json_response(model.as_dict())

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/reset", reset)
    app.router.add_get("/set", set_model)
    return app


async def serve(args: argparse.Namespace) -> None:
    model = Model(args.latency_ms, args.bandwidth_mbps)
    registry = CollectorRegistry()
    runners = []

    async def start(app: web.Application, port: int = 0) -> int:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        runners.append(runner)
        return site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    if args.root or args.proxy:
        app = origin_app(args.root and Path(args.root), args.proxy and f"http://{args.proxy}",
                         model, registry)
        upstream = ("127.0.0.1", await start(app))
    else:
        host, _, port = args.upstream.rpartition(":")
        upstream = (host or "127.0.0.1", int(port))
    relay = Relay(model, upstream, registry)
    server = await asyncio.start_server(relay.handle, "127.0.0.1", args.port)
    public = server.sockets[0].getsockname()[1]
    control = await start(control_app(model, relay, registry))
    print(json.dumps({"url": f"http://127.0.0.1:{public}", "control": f"http://127.0.0.1:{control}",
                      **model.as_dict()}), flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    ap = tool_parser("range_server.py")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--root", help="serve the files under this directory (HTTP Range)")
    where.add_argument("--upstream", metavar="HOST:PORT",
                       help="relay to this server instead (e.g. the fluxon agent)")
    where.add_argument("--proxy", metavar="HOST:PORT",
                       help="a delaying, counting HTTP proxy to this origin, behind the relay")
    ap.add_argument("--port", type=int, default=0, help="public (relay) port; 0: a free one")
    ap.add_argument("--latency-ms", type=float, default=0.0,
                    help="--root and --proxy: sleep this long before answering each request")
    ap.add_argument("--bandwidth-mbps", type=float, default=0.0,
                    help="per-connection cap, MB/s (10^6 bytes/s), server -> client; 0: none")
    args = ap.parse_args(argv)
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
