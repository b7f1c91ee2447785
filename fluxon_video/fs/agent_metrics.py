"""The agent's Prometheus metrics, and the middleware that counts every request into them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import (CollectorRegistry, Counter, Gauge, Histogram, PlatformCollector,
                               ProcessCollector, generate_latest)

# The error kinds the agent answers with: the reasons of fluxon_agent_refusals_total.
REFUSAL_REASONS = ("bad_request", "permission", "not_found", "changed", "internal")
# The kinds of the agent's own limits, reasons of the same counter: a 429 for an
# address that failed to authenticate too often, a 503 when it cannot take a request.
LIMIT_REASONS = ("throttled", "unavailable")
# Request latency buckets (seconds): a page read from local disk takes well under a
# millisecond, one from a network file system or with injected latency much longer.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0)
# Set on an error response: its kind, the refusal's reason here (aiohttp >= 3.13 has
# typed response keys).
REFUSAL_KIND_KEY: Any = (web.ResponseKey("fluxon_refusal", str) if hasattr(web, "ResponseKey")
                         else "fluxon_refusal")
# Set on an answer that holds file bytes and more (a stat with its head): how many.
SERVED_BYTES_KEY: Any = (web.ResponseKey("fluxon_served_bytes", int)
                         if hasattr(web, "ResponseKey") else "fluxon_served_bytes")


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
                                    "File bytes returned by /v1/read (and stats with head), "
                                    "by export", ["export"], registry=r)
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


def _route_label(request: web.Request) -> str:
    # The route's pattern, never the raw path: label values stay a small fixed set.
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def metrics_middleware(metrics: AgentMetrics) -> Any:
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
            status, reason = response.status, response.get(REFUSAL_KIND_KEY)
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
                served = None if response is None or status != 200 else response.get(
                    SERVED_BYTES_KEY, response.content_length if route == "/v1/read" else None)
                if served:
                    metrics.served_bytes.labels(request.query.get("export", "")).inc(served)

    return count
