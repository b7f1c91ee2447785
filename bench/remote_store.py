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


class Store:
    """Redis, the agent (restarted per latency, same port) and the two relays."""

    def __init__(self, work: Path, export: str, video_dir: Path, bandwidth_mbps: float) -> None:
        from fluxon_video.testing import RedisServer, free_port

        self.work, self.video_dir = work, video_dir
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

    def urls(self) -> dict[str, str]:
        return {"range_url": self.range.url, "range_control": self.range.control,
                "range_metrics": self.range.control + "/metrics",
                "agent_url": self.agent_relay.url,
                "agent_metrics": f"http://127.0.0.1:{self.agent_port}/metrics",
                "agent_relay_control": self.agent_relay.control}

    def flush(self) -> None:
        client = self.redis.client()
        client.flushall()
        client.close()

    def stop(self) -> None:
        for server in (self.agent, self.agent_relay, self.range, self.redis):
            if server is not None:
                server.stop()


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
