"""Real servers for tests: a private redis-server and the fluxon agent, on loopback."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(check, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as exc:  # noqa: BLE001 - retried until the deadline
            last = exc
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not come up: {last}")


class RedisServer:
    """redis-server on a free port, no persistence; stop() and start() keep the port."""

    def __init__(self, workdir: Path) -> None:
        if not shutil.which("redis-server"):
            raise RuntimeError("redis-server is not installed (make build installs it)")
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir), "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait(lambda: redis.Redis(port=self.port, socket_timeout=0.5).ping(), "redis-server")
        return self

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None


class AgentProcess:
    """`python -m fluxon_video agent` as a subprocess on a free loopback port.

    ``args`` are extra command-line options, e.g. ``["--inject-latency-ms", "2"]``.
    """

    def __init__(self, config_path: Path, args: Sequence[str] = ()) -> None:
        self.config_path = config_path
        self.args = list(args)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log = config_path.with_suffix(f".{self.port}.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> AgentProcess:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fluxon_video", "agent", "--config", str(self.config_path),
                 "--listen", f"127.0.0.1:{self.port}", *self.args],
                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})

        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited: {self.log.read_text()}")
            return urllib.request.urlopen(self.url + "/healthz", timeout=1).read() == b"ok"

        _wait(healthy, "the agent")
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
