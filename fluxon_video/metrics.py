"""A trainer's read counters as Prometheus metrics.

The agent has its own ``/metrics``; this is the other end: what one training
process (and, through ``LoaderStats``, its DataLoader workers) read, from
where, and how much of it came ahead of the reads (``ahead_pages``,
``ahead_hits``, ``ahead_wasted``). Each ``FluxonFsProcessStats`` field becomes
a counter ``fluxon_video_<field>_total``; the ``*_ms`` times become
``fluxon_video_<name>_seconds_total``.

    server = fluxon_video.metrics.serve_metrics(patcher.stats, port=9101)
    ...
    server.close()

or, beside metrics of your own, ``REGISTRY.register(StatsCollector(patcher.stats))``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import fields

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from fluxon_video.stats import FluxonFsProcessStats

StatsSource = Callable[[], FluxonFsProcessStats]
NAMESPACE = "fluxon_video"


class StatsCollector(Collector):
    """Counters read from ``source()`` at each scrape: ``patcher.stats`` or
    ``pool.stats`` for one process, ``LoaderStats.cumulative`` for a
    DataLoader's workers."""

    def __init__(self, source: StatsSource, namespace: str = NAMESPACE) -> None:
        self.source = source
        self.namespace = namespace

    def collect(self) -> Iterator[CounterMetricFamily]:
        stats = self.source()
        for f in fields(FluxonFsProcessStats):
            value = float(getattr(stats, f.name))
            if f.name.endswith("_ms"):
                yield CounterMetricFamily(
                    f"{self.namespace}_{f.name[:-3]}_seconds",
                    f"fluxon_video {f.name[:-3]} time, summed over reads", value=value / 1e3)
            else:
                yield CounterMetricFamily(f"{self.namespace}_{f.name}",
                                          f"fluxon_video {f.name.replace('_', ' ')}", value=value)


class MetricsServer:
    """The HTTP server ``serve_metrics`` started; ``close()`` stops it (twice is fine)."""

    def __init__(self, source: StatsSource, port: int, addr: str) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(StatsCollector(source))
        self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        self._lock = threading.Lock()
        self.addr = addr
        self.port: int = self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}/metrics"

    def close(self) -> None:
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_metrics(source: StatsSource, port: int = 0, addr: str = "127.0.0.1") -> MetricsServer:
    """Serve ``source()``'s counters at ``http://addr:port/metrics`` from a thread
    (port 0: a free one, see ``.port``). Loopback by default: the counters name
    no file, but a port open to the network is the caller's choice to make."""
    return MetricsServer(source, port, addr)
