"""The store's own counters around a remote pass: the origin's requests and bytes
(Prometheus text from the agent's or the range server's /metrics) and the
connections the relay in front of it saw."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable


def scrape(url: str) -> dict[str, float]:
    """Prometheus text from ``url`` -> {sample name + sorted labels: value}."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


def _sum(sample: dict[str, float], name: str, where: Callable[[str], bool] = lambda _: True) -> float:
    return sum(v for k, v in sample.items() if k.startswith(name + "{") and where(k))


class Counters:
    """Before/after a pass: the origin's requests and bytes, the relay's connections."""

    def __init__(self, store: dict, side: str) -> None:
        self.side = side  # "peer" (range server) or "fluxon" (agent)
        # An object-store origin (store["fluxon_origin"] == "proxy"): the agent reads the
        # origin through the same counting proxy as the peers; count fluxon there too.
        self.agent = store["agent_metrics"] if side == "fluxon" else None
        at_proxy = side == "peer" or store.get("fluxon_origin") == "proxy"
        self.origin = store["range_metrics"] if at_proxy else store["agent_metrics"]
        self.relay = store["range_control"] if at_proxy else store["agent_relay_control"]

    def snapshot(self) -> dict[str, float]:
        o = scrape(self.origin)
        r = scrape(self.relay + "/metrics")
        out: dict[str, float] = {}
        if self.origin != self.agent:
            out = {"requests": _sum(o, "bench_range_requests_total"),
                   "bytes": _sum(o, "bench_range_served_bytes_total"),
                   "head_requests": _sum(o, "bench_range_requests_total",
                                         lambda k: "method=HEAD" in k)}
        if self.agent is not None:
            a = o if self.origin == self.agent else scrape(self.agent)
            agent = {"requests": _sum(a, "fluxon_agent_requests_total",
                                      lambda k: "route=/v1/read" in k or "route=/v1/stat" in k),
                     "bytes": _sum(a, "fluxon_agent_served_bytes_total"),
                     "stat_requests": _sum(a, "fluxon_agent_requests_total",
                                           lambda k: "route=/v1/stat" in k)}
            out.update(agent if not out else {f"agent_{k}": v for k, v in agent.items()})
        out["relay_opened"] = _sum(r, "bench_relay_connections_opened_total")
        out["relay_bytes_down"] = _sum(r, "bench_relay_bytes_down_total")
        out["connections_used"] = _sum(r, "bench_relay_connections_used")
        return out

    def start(self) -> dict[str, float]:
        urllib.request.urlopen(self.relay + "/reset", timeout=10).read()
        return self.snapshot()

    def since(self, before: dict[str, float]) -> dict[str, float]:
        after = self.snapshot()
        out = {k: after[k] - before[k] for k in after if k != "connections_used"}
        out["connections_used"] = after["connections_used"]
        return out
