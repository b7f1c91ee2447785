"""The remote benchmark's processes: the store (Redis, the agent, the relays of
bench/range_server.py) and the child processes that run the passes."""

from __future__ import annotations

import json
import select
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from fluxon_access import write_agent_config

BENCH = Path(__file__).resolve().parent
PASS_TIMEOUT_S = 900


class RelayProcess:
    """bench/range_server.py in a subprocess; reads its one-line JSON greeting."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
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


class _Servers:
    """What both stores have: Redis, the agent behind its relay, the origin's relay."""

    redis: Any
    agent: Any
    agent_port: int
    agent_relay: RelayProcess
    range: RelayProcess
    origin = "agent"  # who serves fluxon's origin requests (Counters reads it)

    def urls(self) -> dict[str, str]:
        return {"range_url": self.range.url, "range_control": self.range.control,
                "range_metrics": self.range.control + "/metrics",
                "agent_url": self.agent_relay.url,
                "agent_metrics": f"http://127.0.0.1:{self.agent_port}/metrics",
                "agent_relay_control": self.agent_relay.control,
                "fluxon_origin": self.origin}

    def flush(self) -> None:
        client = self.redis.client()
        client.flushall()
        client.close()

    def stop(self) -> None:
        for server in (self.agent, self.agent_relay, self.range, self.redis,
                       getattr(self, "s3", None)):
            if server is not None:
                server.stop()


class Store(_Servers):
    """Redis, the agent (restarted per latency, same port) and the two relays."""

    def __init__(self, work: Path, export: str, video_dir: Path, bandwidth_mbps: float) -> None:
        from fluxon_video.testing import RedisServer, free_port

        self.work, self.video_dir = work, video_dir
        self.root = str(video_dir.resolve())
        self.redis = RedisServer(work / "redis").start()
        self.config = write_agent_config(work / "agent.toml", export, video_dir.resolve())
        self.agent_port = free_port()
        self.agent: Any = None
        bw = ["--bandwidth-mbps", str(bandwidth_mbps)]
        self.range = RelayProcess(["--root", str(video_dir.resolve()), *bw],
                                  work / "range_server.log")
        self.agent_relay = RelayProcess(["--upstream", f"127.0.0.1:{self.agent_port}", *bw],
                                        work / "agent_relay.log")

    def set_latency(self, latency_ms: float) -> None:
        from fluxon_video.testing import AgentProcess

        if self.agent is not None:
            self.agent.stop()
        self.agent = AgentProcess(self.config, ["--inject-latency-ms", str(latency_ms)],
                                  port=self.agent_port).start()
        self.range.set(latency_ms=latency_ms)


BUCKET, PREFIX = "bench", "videos"


class S3Store(_Servers):
    """The object-store origin: moto's S3 server (buckets in memory) behind
    ``range_server.py --proxy`` (L ms before every request, requests and bytes counted)
    and its relay (the per-connection cap). Peers and the agent alike reach S3 only
    through that relay. The agent (export root ``s3://bench/videos``, the store options
    and credentials in its config, no injected latency) sits behind an unshaped relay
    that only counts connections: it is the cache service next to the trainers, as Redis
    is; the remote store is S3."""

    origin = "proxy"

    def __init__(self, work: Path, export: str, video_dir: Path, bandwidth_mbps: float,
                 names: list[str]) -> None:
        from fluxon_video.testing import AgentProcess, RedisServer, S3Server, free_port

        self.work, self.video_dir = work, video_dir
        self.root = f"s3://{BUCKET}/{PREFIX}"
        self.agent = None
        self.s3 = S3Server(work / "s3").start()
        self.redis = RedisServer(work / "redis").start()
        self.s3.upload(BUCKET, {f"{PREFIX}/{n}": video_dir / n for n in names})
        self.range = RelayProcess(["--proxy", f"127.0.0.1:{self.s3.port}",
                                   "--bandwidth-mbps", str(bandwidth_mbps)],
                                  work / "s3_proxy.log")
        self.config = write_agent_config(work / "agent-s3.toml", export, self.root,
                                         self.options())
        self.agent_port = free_port()
        self.agent_relay = RelayProcess(["--upstream", f"127.0.0.1:{self.agent_port}",
                                         "--bandwidth-mbps", "0"], work / "agent_relay.log")
        self.agent = AgentProcess(self.config, [], port=self.agent_port).start()

    def options(self) -> dict[str, Any]:
        """The export's store options: moto's, with the endpoint through the proxy."""
        return {**self.s3.store_options(), "endpoint": self.range.url}

    def set_latency(self, latency_ms: float) -> None:
        self.range.set(latency_ms=latency_ms)

    def peer_access(self) -> dict[str, Any]:
        """What a peer needs to read the bucket through the proxy (s3fs, obstore)."""
        o = self.options()
        return {"bucket": BUCKET, "prefix": PREFIX, "endpoint": o["endpoint"],
                "region": o["region"], "key": o["access_key_id"],
                "secret": o["secret_access_key"]}


class PeerWorker:
    """A long-lived process for one peer library (remote_tasks.peer_worker)."""

    def __init__(self, ctx: Any, family: str, warm_path: str, threads: int) -> None:
        import remote_tasks

        self.family = family
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=remote_tasks.peer_worker,
                                args=(child, family, warm_path, threads), daemon=True)
        self.proc.start()
        child.close()
        hello = self.conn.recv() if self.conn.poll(300) else {"ready": False, "error": "timeout"}
        self.ready = hello.get("ready", False)
        self.error = hello.get("error", "")
        self.versions = hello.get("versions", {})

    def run(self, task: dict) -> dict:
        self.conn.send(task)
        if not self.conn.poll(PASS_TIMEOUT_S):
            self.stop()
            self.ready = False
            return {"row": task["row"], "fatal": f"no answer within {PASS_TIMEOUT_S} s"}
        return self.conn.recv()

    def stop(self) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.proc.join(10)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()


def fluxon_process(ctx: Any, task: dict) -> dict:
    """One fluxon pass in a new process."""
    import remote_tasks

    conn, child = ctx.Pipe()
    proc = ctx.Process(target=remote_tasks.fluxon_child, args=(child, task), daemon=True)
    proc.start()
    child.close()
    if conn.poll(PASS_TIMEOUT_S):
        try:
            out = conn.recv()
        except EOFError:
            out = {"fatal": f"the process exited with {proc.exitcode}"}
    else:
        proc.kill()
        out = {"fatal": f"no answer within {PASS_TIMEOUT_S} s"}
    proc.join(30)
    return out
