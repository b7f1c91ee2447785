"""Real servers for tests and benchmarks: a private redis-server and the fluxon agent.

Both run as subprocesses on a free port of 127.0.0.1, so a test suite can
exercise the whole FluxonFS path (agent over HTTP, pieces in Redis) without
touching shared infrastructure::

    from fluxon_video.testing import AgentProcess, RedisServer

    with RedisServer(tmp_path) as redis_server, AgentProcess(config_path) as agent:
        patcher = FluxonFsPatcher(exports=[FluxonFsExport("train", root, agent_url=agent.url,
                                                          allow=["alice"])],
                                  identities={"alice": "token"},
                                  client=ClientSettings(redis_url=redis_server.url),
                                  identity="alice")

``start()`` / ``stop()`` work too; ``stop()`` may be called any number of
times, and ``start()`` after ``stop()`` reuses the same port (a test can take
a server away and bring it back).

Needs the ``redis-server`` binary on ``PATH`` for :class:`RedisServer`
(``make build`` installs it; on Debian ``apt-get install redis-server``).
This module is not imported by ``import fluxon_video``.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import redis

__all__ = ["AgentProcess", "RedisServer", "ServerStartError", "free_port", "wait_until"]

LOOPBACK = "127.0.0.1"
_S = TypeVar("_S", bound="_Server")


class ServerStartError(RuntimeError):
    """A server could not be started, or did not become ready in time."""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on ``host`` that nothing listens on right now.

    The port is released before it is returned, so another process could take
    it before the caller binds it; on a test machine that is rare enough.
    """
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_until(check: Callable[[], object], what: str, timeout: float = 20.0,
               interval: float = 0.05) -> None:
    """Call ``check`` until it returns something true, for at most ``timeout`` seconds.

    Exceptions from ``check`` count as "not yet", except :class:`ServerStartError`,
    which ends the wait at once (a check raises it when the server process
    died). On timeout raises :class:`ServerStartError` naming ``what`` and the
    last exception seen.
    """
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            if check():
                return
        except ServerStartError:
            raise
        except Exception as exc:  # noqa: BLE001 - retried until the deadline
            last = exc
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    raise ServerStartError(f"{what} did not come up within {timeout:g} s"
                           + (f": {last}" if last else ""))


def _terminate(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class _Server:
    """Start/stop bookkeeping and context-manager support shared by both servers."""

    proc: subprocess.Popen[bytes] | None
    port: int

    @property
    def running(self) -> bool:
        """Whether the subprocess is alive."""
        return self.proc is not None and self.proc.poll() is None

    def start(self: _S, timeout: float = 20.0) -> _S:
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the subprocess (SIGTERM, then SIGKILL after 10 s). Safe to call again."""
        proc, self.proc = self.proc, None
        if proc is not None:
            _terminate(proc)

    def __enter__(self: _S) -> _S:
        """Start the server unless it is running; ``__exit__`` stops it."""
        if not self.running:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class RedisServer(_Server):
    """A private ``redis-server`` on a free loopback port, with no persistence.

    ``workdir`` holds its working directory and its log
    (``redis-<port>.log``). ``stop()`` then ``start()`` keeps the port, so the
    same URL works again; data does not survive a stop.
    """

    def __init__(self, workdir: str | os.PathLike[str], port: int | None = None,
                 executable: str = "redis-server") -> None:
        found = shutil.which(executable)
        if not found:
            raise ServerStartError(
                f"{executable} is not installed or not on PATH: install it "
                "(Debian: apt-get install redis-server) or run `make build`, which installs it")
        self.executable = found
        self.workdir = Path(workdir)
        self.port = port if port is not None else free_port()
        self.proc = None
        self.log = self.workdir / f"redis-{self.port}.log"

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``, for ``ClientSettings(redis_url=...)``."""
        return f"redis://{LOOPBACK}:{self.port}/0"

    def start(self, timeout: float = 20.0) -> RedisServer:
        """Start the server and wait until it answers PING. Returns ``self``.

        Does nothing if it is already running.
        """
        if self.running:
            return self
        import redis

        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [self.executable, "--port", str(self.port), "--bind", LOOPBACK, "--save", "",
                 "--appendonly", "no", "--dir", str(self.workdir), "--protected-mode", "no"],
                stdout=log, stderr=subprocess.STDOUT)
        proc = self.proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise ServerStartError(f"redis-server exited with {proc.returncode} "
                                       f"(port {self.port}):\n{_tail(self.log)}")
            client = redis.Redis(host=LOOPBACK, port=self.port, socket_timeout=0.5)
            try:
                return bool(client.ping())
            finally:
                client.close()

        try:
            wait_until(ready, f"redis-server on port {self.port}", timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def client(self, **kwargs: object) -> redis.Redis:
        """A redis-py client connected to this server (``kwargs`` go to ``redis.Redis``)."""
        import redis

        return redis.Redis(host=LOOPBACK, port=self.port, **kwargs)  # type: ignore[arg-type]


class AgentProcess(_Server):
    """The real agent, ``python -m fluxon_video agent``, on a free loopback port.

    Runs ``<this interpreter> -m fluxon_video agent --config CONFIG --listen
    127.0.0.1:PORT [args]``; ``args`` are extra command-line options, e.g.
    ``["--inject-latency-ms", "2"]`` or ``["--io-threads", "4"]``. The agent's
    output goes to ``log`` (next to the config file, ``<config>.<port>.log``).
    ``stop()`` then ``start()`` keeps the port.

    ``tls=(cert_path, key_path)`` serves HTTPS (``--tls-cert``/``--tls-key``):
    ``url`` is then ``https://...`` and ``ca_bundle`` is the certificate, which
    the readiness check (and a client, as ``agent_ca_bundle``) trusts; the
    certificate must name 127.0.0.1 (subjectAltName ``IP:127.0.0.1``).
    """

    def __init__(self, config_path: str | os.PathLike[str], args: Sequence[str] = (),
                 port: int | None = None,
                 tls: tuple[str | os.PathLike[str], str | os.PathLike[str]] | None = None) -> None:
        self.config_path = Path(config_path)
        self.args = list(args)
        self.port = port if port is not None else free_port()
        self.proc = None
        self.log = self.config_path.with_suffix(f".{self.port}.log")
        self.tls = (str(tls[0]), str(tls[1])) if tls is not None else None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (``https://`` with ``tls``), for ``FluxonFsExport(agent_url=...)``."""
        return f"{'https' if self.tls else 'http'}://{LOOPBACK}:{self.port}"

    @property
    def ca_bundle(self) -> str | None:
        """The certificate served with ``tls`` (for ``ClientSettings(agent_ca_bundle=...)``), else None."""
        return self.tls[0] if self.tls else None

    def start(self, timeout: float = 20.0) -> AgentProcess:
        """Start the agent and wait until ``GET /healthz`` answers ``ok``. Returns ``self``.

        Does nothing if it is already running. If the agent exits while
        starting (a bad config, say), raises :class:`ServerStartError` with
        the end of its log.
        """
        if self.running:
            return self
        if not self.config_path.is_file():
            raise ServerStartError(f"agent config {self.config_path} does not exist")
        tls_args = ["--tls-cert", self.tls[0], "--tls-key", self.tls[1]] if self.tls else []
        context = ssl.create_default_context(cafile=self.ca_bundle) if self.tls else None
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fluxon_video", "agent", "--config", str(self.config_path),
                 "--listen", f"{LOOPBACK}:{self.port}", *tls_args, *self.args],
                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        proc = self.proc

        def healthy() -> bool:
            if proc.poll() is not None:
                raise ServerStartError(f"the agent exited with {proc.returncode}:\n"
                                       f"{_tail(self.log)}")
            with urllib.request.urlopen(self.url + "/healthz", timeout=1,
                                        context=context) as response:
                return response.read() == b"ok"

        try:
            wait_until(healthy, f"the agent on port {self.port}", timeout)
        except BaseException:
            self.stop()
            raise
        return self
