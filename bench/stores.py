"""How the scenarios reach their stores: the servers (Redis, the agent, bench/range_server.py,
moto's S3), their counters, and fluxon's patcher from ``fx``, a plain dict that travels to
child processes (export, root, agent_url, redis_url, identity, token, export settings)."""

from __future__ import annotations

import json
import select
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
# The agent refuses tokens under 128 bits: one from `fluxon-video token new`.
IDENTITY, TOKEN = "bench", "Uiqc8NuDLs2_yKmZdi2ymyE3o3ApDKPOp4KpOtolw_8"
# The secret sealing the bench's KV entries (docs/security.md).
KV_KEY = "bench-kv-key-Zt4Xq9Lm2Vb7Nc5Wd8Hf1Jg6Ks3P"
# Export settings a scenario may set; the export's defaults otherwise.
OPTIONAL = ("piece_size", "metadata_cache_shared", "metadata_cache_ttl_ms")
BUCKET, PREFIX = "bench", "videos"


def write_agent_config(path: Path, export: str, root: Path | str,
                       store_options: dict[str, Any] | None = None) -> Path:
    """The agent's TOML: one export of ``root`` that the bench identity may read (an
    object-store root with its ``store`` table: the agent holds the credentials)."""
    def value(v: Any) -> str:  # a JSON string or number is a TOML basic string or number
        return ("true" if v else "false") if isinstance(v, bool) else json.dumps(v)
    inline = ", ".join(f"{k} = {value(v)}" for k, v in (store_options or {}).items())
    path.write_text(f'[identities]\n{IDENTITY} = "{TOKEN}"\n\n[[exports]]\n'
                    f'name = "{export}"\nroot = "{root}"\nallow = ["{IDENTITY}"]\n'
                    + (f"store = {{ {inline} }}\n" if store_options else ""))
    path.chmod(0o600)  # it holds the token (and maybe store secrets): others may not read it
    return path


def store(export: str, root: Path | str, agent_url: str, redis_url: Any, **optional: Any) -> dict:
    """The ``fx`` dict of a store."""
    return {"export": export, "root": str(root), "agent_url": agent_url,
            "redis_url": redis_url, "identity": IDENTITY, "token": TOKEN, **optional}


def make_patcher(fx: dict, **client: Any) -> Any:
    import fluxon_video as fv
    from fluxon_video.fs.config import ClientSettings, FluxonFsExport

    # Per-process stats unless a row asks for shared ones (its "+shared"): the rows keep
    # measuring the agent's stat though sharing is the product's default.
    options = {"metadata_cache_shared": False, **{k: fx[k] for k in OPTIONAL if k in fx}}
    export = FluxonFsExport(fx["export"], fx["root"], agent_url=fx["agent_url"],
                            allow=[fx["identity"]], **options)
    return fv.FluxonFsPatcher(exports=[export], identities={fx["identity"]: fx["token"]},
                              client=ClientSettings(redis_url=fx["redis_url"], **{
                                  **({"kv_keys": [KV_KEY]} if fx["redis_url"] else {}),
                                  **client}),
                              identity=fx["identity"])


def settle(patcher: Any, timeout_s: float = 120) -> None:
    """Wait for the backfill, so that every piece read so far is in the KV (the next
    reader's hits and misses are then the cache's, not the queue's)."""
    if not patcher.client.backfill.wait_idle(timeout=timeout_s):
        raise RuntimeError(f"backfill did not finish within {timeout_s:g} s")


def evict(fx: dict, relpath: str) -> None:
    """Drop every KV piece of one file (a cold start for it, others stay warm)."""
    import redis

    client = redis.Redis.from_url(fx["redis_url"])
    for pattern in (f"*:{relpath}:*", f"*:{relpath}"):  # pieces and stats; the index
        for key in client.scan_iter(match=pattern, count=1000):
            client.delete(key)


def agent(work: Path, export: str, root: Path | str, latency_ms: float = 0.0,
          store_options: dict | None = None, **kw: Any) -> Any:
    """The real agent on loopback, exporting ``root``, waiting ``latency_ms`` per request."""
    from fluxon_video.testing import AgentProcess

    config = write_agent_config(work / f"agent-{export}-{latency_ms:g}.toml", export, root,
                                store_options)
    args = ["--inject-latency-ms", f"{latency_ms:g}"] if latency_ms or not store_options else []
    return AgentProcess(config, args, **kw).start()


class RelayProcess:
    """bench/range_server.py in a subprocess; reads its one-line JSON greeting."""

    def __init__(self, args: list[str], log: Path) -> None:
        with open(log, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, str(BENCH / "range_server.py"), *args],
                                         stdout=subprocess.PIPE, stderr=err)
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            self.stop()
            raise RuntimeError(f"range_server.py did not start: {log.read_text()[-2000:]}")
        info = json.loads(line)
        self.url, self.control = info["url"], info["control"]

    def set(self, **params: float) -> None:
        query = "&".join(f"{k}={v}" for k, v in params.items())
        urllib.request.urlopen(f"{self.control}/set?{query}", timeout=10).read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def cpu_s(pids: list[int]) -> float:
    """CPU-seconds so far of these processes (the store's: what it costs the cores the
    readers share with it on this machine); a process gone counts nothing."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def _pids(*servers: Any) -> list[int]:
    """The pids of the servers that run (None, or one without a process: none)."""
    return [proc.pid for proc in (getattr(s, "proc", None) for s in servers) if proc is not None]


class RemoteStore:
    """The remote suites' store (bench/rounds_group.py): Redis, the agent behind a relay,
    and the peers' origin behind another: range_server.py --root, or with ``s3`` (object
    names) moto's S3 behind range_server.py --proxy, which the agent (no injected
    latency) reads through too."""

    def __init__(self, work: Path, export: str, video_dir: Path, bandwidth_mbps: float,
                 s3: list[str] | None = None) -> None:
        from fluxon_video.testing import RedisServer, S3Server, free_port

        self.export, self.video_dir, self.agent, self.s3 = export, video_dir.resolve(), None, None
        self.redis = RedisServer(work / "redis").start()
        self.agent_port, self.work = free_port(), work
        bw = ["--bandwidth-mbps", str(bandwidth_mbps)]
        if s3 is None:
            self.root, self.origin = str(self.video_dir), "agent"
            self.range = RelayProcess(["--root", self.root, *bw], work / "range_server.log")
        else:
            self.root, self.origin = f"s3://{BUCKET}/{PREFIX}", "proxy"
            self.s3 = S3Server(work / "s3").start()
            self.s3.upload(BUCKET, {f"{PREFIX}/{n}": video_dir / n for n in s3})
            self.range = RelayProcess(["--proxy", f"127.0.0.1:{self.s3.port}", *bw],
                                      work / "s3_proxy.log")
            self.agent = self.start_agent(0.0)
        self.agent_relay = RelayProcess(["--upstream", f"127.0.0.1:{self.agent_port}",
                                         *(bw if s3 is None else ["--bandwidth-mbps", "0"])],
                                        work / "agent_relay.log")

    def start_agent(self, latency_ms: float) -> Any:
        options = self.options() if self.s3 else None
        return agent(self.work, self.export, self.root, latency_ms, options, port=self.agent_port)

    def options(self) -> dict[str, Any]:
        """The S3 export's store options: moto's, with the endpoint through the proxy."""
        return {**self.s3.store_options(), "endpoint": self.range.url}

    def set_latency(self, latency_ms: float) -> None:
        if self.s3 is None:
            if self.agent is not None:
                self.agent.stop()
            self.agent = self.start_agent(latency_ms)
        self.range.set(latency_ms=latency_ms)

    def peer_access(self) -> dict[str, Any] | None:
        """What a peer needs to read the bucket through the proxy (s3fs, obstore)."""
        if self.s3 is None:
            return None
        o = self.options()
        return {"bucket": BUCKET, "prefix": PREFIX, "endpoint": o["endpoint"],
                "region": o["region"], "key": o["access_key_id"], "secret": o["secret_access_key"]}

    def fx(self, **optional: Any) -> dict:
        """fluxon's ``fx`` for this store: the agent through its relay, this Redis."""
        return store(self.export, self.root, self.agent_relay.url, self.redis.url, **optional)

    def urls(self) -> dict[str, str]:
        return {"range_url": self.range.url, "range_control": self.range.control,
                "range_metrics": self.range.control + "/metrics",
                "agent_url": self.agent_relay.url,
                "agent_metrics": f"http://127.0.0.1:{self.agent_port}/metrics",
                "agent_relay_control": self.agent_relay.control, "fluxon_origin": self.origin}

    def pids(self) -> list[int]:
        """The store's processes (Redis, the agent, the relays, moto)."""
        return _pids(self.agent, self.agent_relay, self.range, self.redis, self.s3)

    def model_pids(self) -> list[int]:
        """Of ``pids``, the ones that stand in for other machines: the relays (the network)
        and moto (the object store). A training node does not share its cores with them."""
        return _pids(self.agent_relay, self.range, self.s3)

    def flush(self) -> None:
        client = self.redis.client()
        client.flushall()
        client.close()

    def stop(self) -> None:
        for server in (self.agent, self.agent_relay, self.range, self.redis, self.s3):
            if server is not None:
                server.stop()


class PassModel(RemoteStore):
    """The remote suites' store at L ms per request and 50 MB/s per connection, for the
    scenarios that read their whole workload through it once per pass (the av suite,
    bench/av_group.py): fluxon through the agent and Redis (a row "fluxon cold": Redis
    flushed, then a new patcher; another fluxon row: a new patcher, Redis warm), the peers
    from the HTTP Range server (``url``)."""

    def __init__(self, work: Path, export: str, root: Path, latency_ms: float) -> None:
        super().__init__(work, export, root, 50.0)
        self.set_latency(latency_ms)
        self.patcher: Any = None

    def start_pass(self, row: str) -> Any:
        """Before a pass of ``row``: the pass's new patcher for fluxon, None for a peer."""
        self.close_patcher()
        if row.startswith("fluxon"):
            if row == "fluxon cold":
                self.flush()
            self.patcher = make_patcher(self.fx())
        return self.patcher

    def url(self, relpath: str) -> str:
        return f"{self.range.url}/{relpath}"

    def close_patcher(self) -> None:
        if self.patcher is not None:
            self.patcher.close()
        self.patcher = None

    def stop(self) -> None:
        self.close_patcher()
        super().stop()


def scrape(url: str) -> dict[str, float]:
    """Prometheus text from ``url`` -> {sample name + sorted labels: value}."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {f"{s.name}{{{','.join(f'{k}={v}' for k, v in sorted(s.labels.items()))}}}": s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def total(sample: dict[str, float], name: str, *within: str) -> float:
    """The sum of ``name``'s samples (those whose labels hold one of ``within``)."""
    return sum(v for k, v in sample.items() if k.startswith(name + "{")
               and (not within or any(w in k for w in within)))


class Counters:
    """Before/after a pass: the origin's requests and bytes, the relay's connections.
    ``side``: "peer" (the range server or S3 proxy) or "fluxon" (the agent; with an
    object-store origin, also the proxy the agent reads S3 through)."""

    def __init__(self, urls: dict, side: str) -> None:
        self.agent = urls["agent_metrics"] if side == "fluxon" else None
        at_proxy = side == "peer" or urls.get("fluxon_origin") == "proxy"
        self.origin = urls["range_metrics"] if at_proxy else urls["agent_metrics"]
        self.relay = urls["range_control"] if at_proxy else urls["agent_relay_control"]

    def snapshot(self) -> dict[str, float]:
        o, r = scrape(self.origin), scrape(self.relay + "/metrics")
        out: dict[str, float] = {}
        if self.origin != self.agent:
            out = {"requests": total(o, "bench_range_requests_total"),
                   "bytes": total(o, "bench_range_served_bytes_total"),
                   "head_requests": total(o, "bench_range_requests_total", "method=HEAD")}
        if self.agent is not None:
            a = o if self.origin == self.agent else scrape(self.agent)
            mine = {"requests": total(a, "fluxon_agent_requests_total", "route=/v1/read",
                                      "route=/v1/stat"),
                    "bytes": total(a, "fluxon_agent_served_bytes_total"),
                    "stat_requests": total(a, "fluxon_agent_requests_total", "route=/v1/stat")}
            out.update(mine if not out else {f"agent_{k}": v for k, v in mine.items()})
        return {**out, "relay_opened": total(r, "bench_relay_connections_opened_total"),
                "relay_bytes_down": total(r, "bench_relay_bytes_down_total"),
                "connections_used": total(r, "bench_relay_connections_used")}

    def start(self) -> dict[str, float]:
        urllib.request.urlopen(self.relay + "/reset", timeout=10).read()
        return self.snapshot()

    def since(self, before: dict[str, float]) -> dict[str, float]:
        after = self.snapshot()
        return {k: after[k] - (0 if k == "connections_used" else before[k]) for k in after}
