"""Real servers for tests and benchmarks: a private redis-server, a Redis Cluster, the agent.

All run as subprocesses on a free port of 127.0.0.1, so a test suite can
exercise the whole FluxonFS path (agent over HTTP, pieces in Redis) without
touching shared infrastructure::

    from fluxon_video.testing import AgentProcess, RedisServer

    with RedisServer(tmp_path) as redis_server, AgentProcess(config_path) as agent:
        patcher = FluxonFsPatcher(exports=[FluxonFsExport("train", root, agent_url=agent.url,
                                                          allow=["alice"])],
                                  identities={"alice": token},  # `fluxon-video token new`
                                  client=ClientSettings(redis_url=redis_server.url,
                                                        kv_keys=[kv_key]),  # `token new` too
                                  identity="alice")

``start()`` / ``stop()`` work too; ``stop()`` may be called any number of
times, and ``start()`` after ``stop()`` reuses the same port (a test can take
a server away and bring it back).

:class:`RedisCluster` is a real N-master Redis Cluster (``redis-server
--cluster-enabled yes`` per master, joined by ``redis-cli --cluster create``);
``stop_node(i)`` / ``start_node(i)`` take one master away and bring it back
with its slots.

:class:`S3Server` is a real S3-compatible server (moto's standalone server,
``pip install 'moto[server]'``) holding buckets in memory; ``store_options()``
is what an export's ``store`` table needs to reach it.

Needs the ``redis-server`` binary on ``PATH`` for :class:`RedisServer`, and
``redis-cli`` too for :class:`RedisCluster` (``make build`` installs both; on
Debian ``apt-get install redis-server``).
This module is not imported by ``import fluxon_video``.
"""

from __future__ import annotations

import os
import re
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
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import redis

__all__ = ["AgentProcess", "RedisCluster", "RedisServer", "S3Server", "ServerStartError",
           "free_port", "wait_until"]

LOOPBACK = "127.0.0.1"
_M = TypeVar("_M", bound="_Managed")


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


def _which(executable: str) -> str:
    found = shutil.which(executable)
    if not found:
        raise ServerStartError(
            f"{executable} is not installed or not on PATH: install it "
            "(Debian: apt-get install redis-server) or run `make build`, which installs it")
    return found


class _Managed:
    """``with`` support for anything with ``running``, ``start()`` and ``stop()``."""

    @property
    def running(self) -> bool:
        raise NotImplementedError

    def start(self: _M, timeout: float = 20.0) -> _M:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self: _M) -> _M:
        """Start unless running; ``__exit__`` stops."""
        if not self.running:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class _Server(_Managed):
    """Start/stop bookkeeping of one server subprocess."""

    proc: subprocess.Popen[bytes] | None
    port: int
    log: Path

    @property
    def running(self) -> bool:
        """Whether the subprocess is alive."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """Stop the subprocess (SIGTERM, then SIGKILL after 10 s). Safe to call again."""
        proc, self.proc = self.proc, None
        if proc is not None:
            _terminate(proc)

    def _launch(self, cmd: Sequence[str], name: str, answers: Callable[[], bool],
                timeout: float, env: dict[str, str] | None = None,
                preexec_fn: Callable[[], None] | None = None) -> None:
        """Run cmd with its output appended to ``self.log`` and wait until
        ``answers()`` is true; a process that exits first raises ServerStartError
        with the end of its log, and one that never answers is stopped."""
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT,
                                         env=env, preexec_fn=preexec_fn)
        proc = self.proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise ServerStartError(f"{name} exited with {proc.returncode} "
                                       f"(port {self.port}):\n{_tail(self.log)}")
            return answers()

        try:
            wait_until(ready, f"{name} on port {self.port}", timeout)
        except BaseException:
            self.stop()
            raise


class RedisServer(_Server):
    """A private ``redis-server`` on a free loopback port, with no persistence.

    ``workdir`` holds its working directory and its log
    (``redis-<port>.log``). ``stop()`` then ``start()`` keeps the port, so the
    same URL works again; data does not survive a stop. ``args`` are extra
    ``redis-server`` options, appended to the command line (e.g.
    ``["--maxmemory", "10mb"]``).
    """

    def __init__(self, workdir: str | os.PathLike[str], port: int | None = None,
                 executable: str = "redis-server", args: Sequence[str] = ()) -> None:
        self.executable = _which(executable)
        self.args = list(args)
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

        def pings() -> bool:
            client = redis.Redis(host=LOOPBACK, port=self.port, socket_timeout=0.5)
            try:
                return bool(client.ping())
            finally:
                client.close()

        self._launch([self.executable, "--port", str(self.port), "--bind", LOOPBACK, "--save", "",
                      "--appendonly", "no", "--dir", str(self.workdir), "--protected-mode", "no",
                      *self.args], "redis-server", pings, timeout)
        return self

    def client(self, **kwargs: object) -> redis.Redis:
        """A redis-py client connected to this server (``kwargs`` go to ``redis.Redis``)."""
        import redis

        return redis.Redis(host=LOOPBACK, port=self.port, **kwargs)  # type: ignore[arg-type]


class RedisCluster(_Managed):
    """A real Redis Cluster: ``masters`` masters, no replicas, on free loopback ports.

    Master ``i`` is ``nodes[i]``, a :class:`RedisServer` on ``ports[i]`` with
    ``--cluster-enabled yes --cluster-config-file nodes-PORT.conf
    --cluster-node-timeout 1000 --cluster-require-full-coverage no
    --cluster-port BUS``, working in ``workdir/PORT`` (which also holds its log,
    ``redis-PORT.log``). The cluster bus gets its own free port (``bus_ports``)
    instead of the default PORT+10000, which can be taken or above 65535.
    ``start()`` joins the masters with ``redis-cli --cluster create ...
    --cluster-replicas 0 --cluster-yes`` and waits until the cluster is
    healthy: every running node reports ``cluster_state:ok`` with all 16384
    slots assigned, and sees every running node connected and not failing.

    ``require_full_coverage=False`` (the default) keeps the other masters
    serving their slots while one is stopped; with True, Redis refuses every
    query (CLUSTERDOWN) once a master is marked failed.

    ``stop_node(i)`` / ``start_node(i)`` take master ``i`` away (SIGTERM) and
    bring it back on the same port with the same ``nodes-PORT.conf``, so it
    rejoins with its slots, empty (no persistence). ``stop()`` stops every
    node and may be called again; ``start()`` afterwards restarts them from
    their ``nodes-PORT.conf`` (the same cluster, empty).
    """

    def __init__(self, workdir: str | os.PathLike[str], masters: int = 3, *,
                 node_timeout_ms: int = 1000, require_full_coverage: bool = False,
                 executable: str = "redis-server", cli: str = "redis-cli") -> None:
        if masters < 3:
            raise ValueError(f"a Redis Cluster needs at least 3 masters, got {masters}")
        self.cli = _which(cli)
        self.workdir = Path(workdir)
        self.masters = masters
        self.node_timeout_ms = node_timeout_ms
        ports: list[int] = []
        while len(ports) < 2 * masters:
            port = free_port()
            if port not in ports:
                ports.append(port)
        self.bus_ports = ports[masters:]
        self.nodes = [
            RedisServer(self.workdir / str(port), port=port, executable=executable, args=[
                "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                "--cluster-node-timeout", str(node_timeout_ms), "--cluster-port", str(bus),
                "--cluster-require-full-coverage", "yes" if require_full_coverage else "no"])
            for port, bus in zip(ports[:masters], self.bus_ports)]
        self.create_output = ""  # what `redis-cli --cluster create` printed
        self._created = False

    @property
    def ports(self) -> list[int]:
        """The masters' client ports, node ``i`` at index ``i``."""
        return [node.port for node in self.nodes]

    @property
    def urls(self) -> list[str]:
        """``redis://127.0.0.1:<port>`` per master: seed nodes for a cluster client."""
        return [f"redis://{LOOPBACK}:{port}" for port in self.ports]

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        """``(host, port)`` per master."""
        return [(LOOPBACK, port) for port in self.ports]

    @property
    def running(self) -> bool:
        """Whether every node's process is alive (not whether the cluster is healthy)."""
        return all(node.running for node in self.nodes)

    def start(self, timeout: float = 30.0) -> RedisCluster:
        """Start the cluster and wait until it is healthy. Returns ``self``.

        The first time, starts the masters and runs ``redis-cli --cluster
        create``; if that fails or the cluster is not healthy within
        ``timeout`` seconds, stops every node and raises
        :class:`ServerStartError` with ``redis-cli``'s output. Later (after
        ``stop()`` or ``stop_node()``), starts the stopped nodes from their
        ``nodes-PORT.conf`` and waits the same way. Does nothing if every node
        is running.
        """
        if self.running:
            return self
        if not self._created:
            return self._create(timeout)
        deadline = time.monotonic() + timeout
        started = [node for node in self.nodes if not node.running]
        try:
            for node in started:
                node.start(_remaining(deadline))
            self._wait_healthy(_remaining(deadline), "the Redis Cluster")
        except BaseException:
            for node in started:
                node.stop()
            raise
        return self

    def _create(self, timeout: float) -> RedisCluster:
        deadline = time.monotonic() + timeout
        for node in self.nodes:  # a new cluster: no memory of an earlier one
            (node.workdir / f"nodes-{node.port}.conf").unlink(missing_ok=True)
        command = [self.cli, "--cluster", "create", *(f"{LOOPBACK}:{port}" for port in self.ports),
                   "--cluster-replicas", "0", "--cluster-yes"]
        shown = " ".join(["redis-cli", *command[1:]])
        try:
            for node in self.nodes:
                node.start(_remaining(deadline))
            try:
                done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, timeout=_remaining(deadline))
            except subprocess.TimeoutExpired as exc:
                self.create_output = _ANSI.sub("", (exc.output or b"").decode(errors="replace"))
                raise ServerStartError(f"`{shown}` did not finish within {timeout:g} s; it said:\n"
                                       f"{self.create_output}") from None
            self.create_output = _ANSI.sub("", done.stdout.decode(errors="replace"))
            if done.returncode != 0:
                raise ServerStartError(f"`{shown}` exited with {done.returncode}:\n"
                                       f"{self.create_output}")
            try:
                self._wait_healthy(_remaining(deadline), "the Redis Cluster")
            except ServerStartError as exc:
                raise ServerStartError(f"{exc}\n`{shown}` said:\n{self.create_output}") from None
        except BaseException:
            self.stop()
            raise
        self._created = True
        return self

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL after 10 s). Safe to call again."""
        for node in self.nodes:
            node.stop()

    def stop_node(self, i: int) -> None:
        """Stop master ``i`` (SIGTERM) and wait for it to exit. Its slots fail until it is back."""
        self.nodes[i].stop()

    def start_node(self, i: int, timeout: float = 30.0) -> None:
        """Restart master ``i`` (same port, same ``nodes-PORT.conf``); wait until the cluster is healthy.

        The node rejoins with its slots (and no keys). Other masters clear
        their "failed" mark on it only after about twice the node timeout, so
        this takes a few seconds. On timeout stops the node again and raises
        :class:`ServerStartError` saying which node sees what.
        """
        if not self._created:
            raise ServerStartError("the cluster was never created: call start() first")
        node = self.nodes[i]
        deadline = time.monotonic() + timeout
        was_running = node.running
        node.start(_remaining(deadline))
        try:
            self._wait_healthy(_remaining(deadline), f"master {i} (port {node.port}) rejoining")
        except BaseException:
            if not was_running:
                node.stop()
            raise

    def client(self, **kwargs: object) -> redis.RedisCluster:
        """A redis-py ``RedisCluster`` seeded with every master (``kwargs`` go to it)."""
        import redis
        from redis.cluster import ClusterNode

        return redis.RedisCluster(  # type: ignore[abstract]
            startup_nodes=[ClusterNode(host, port) for host, port in self.startup_nodes],
            **kwargs)  # type: ignore[arg-type]

    def node_client(self, i: int, **kwargs: object) -> redis.Redis:
        """A plain redis-py client connected to master ``i`` only (no redirections)."""
        import redis

        return redis.Redis(host=LOOPBACK, port=self.ports[i], **kwargs)  # type: ignore[arg-type]

    def node_for_key(self, key: str | bytes) -> int:
        """The index of the master that owns ``key``'s slot (asked of a running node)."""
        import redis.crc

        slot = redis.crc.key_slot(key.encode() if isinstance(key, str) else key)
        for node in self.nodes:
            if not node.running:
                continue
            client = node.client(socket_timeout=2)
            try:
                ranges = client.execute_command("CLUSTER", "SLOTS")
            finally:
                client.close()
            for first, last, owner, *_ in ranges:
                if first <= slot <= last:
                    return self.ports.index(int(owner[1]))
            raise LookupError(f"slot {slot} is not assigned in the cluster")
        raise ServerStartError("no node of the cluster is running")

    def keys_per_node(self) -> list[int]:
        """DBSIZE of each master, node ``i`` at index ``i``; 0 for a stopped node (it has no keys)."""
        sizes = []
        for i, node in enumerate(self.nodes):
            if not node.running:
                sizes.append(0)
                continue
            client = self.node_client(i, socket_timeout=2)
            try:
                sizes.append(int(client.dbsize()))
            finally:
                client.close()
        return sizes

    def flushall(self) -> None:
        """FLUSHALL on every running master (a stopped one comes back empty anyway)."""
        for i, node in enumerate(self.nodes):
            if node.running:
                client = self.node_client(i, socket_timeout=5)
                try:
                    client.flushall()
                finally:
                    client.close()

    def _wait_healthy(self, timeout: float, what: str) -> None:
        wait_until(self._check_healthy, f"{what} (ports {', '.join(map(str, self.ports))})",
                   timeout, interval=0.1)

    def _check_healthy(self) -> bool:
        """True when healthy; raises why not (the last reason ends up in the timeout error)."""
        import redis

        for node in self.nodes:
            proc = node.proc
            if proc is not None and proc.poll() is not None:
                raise ServerStartError(f"redis-server on port {node.port} exited with "
                                       f"{proc.returncode}:\n{_tail(node.log)}")
        up = {node.port for node in self.nodes if node.running}
        for port in sorted(up):
            client = redis.Redis(host=LOOPBACK, port=port, socket_timeout=1, decode_responses=True)
            try:
                info_text = client.execute_command("CLUSTER", "INFO")
                nodes_text = client.execute_command("CLUSTER", "NODES")
            finally:
                client.close()
            info = dict(line.split(":", 1) for line in info_text.split() if ":" in line)
            brief = ", ".join(f"{k}:{info.get(k)}" for k in (
                "cluster_state", "cluster_slots_assigned", "cluster_slots_ok", "cluster_known_nodes"))
            if info.get("cluster_state") != "ok" or info.get("cluster_slots_assigned") != "16384":
                raise _NotHealthy(f"node {port} reports {brief}")
            seen = {}
            for line in nodes_text.splitlines():
                fields = line.split()
                if len(fields) >= 8:
                    seen[int(fields[1].split("@")[0].rsplit(":", 1)[1])] = fields
            if len(seen) != self.masters:
                raise _NotHealthy(f"node {port} knows {len(seen)} of {self.masters} nodes ({brief})")
            for other in sorted(up):
                fields = seen.get(other)
                if fields is None:
                    raise _NotHealthy(f"node {port} does not know node {other}")
                flags = set(fields[2].split(","))
                if flags & {"fail", "fail?", "handshake", "noaddr"} or fields[7] != "connected":
                    raise _NotHealthy(f"node {port} sees node {other} as {fields[2]}, "
                                      f"link {fields[7]} ({brief})")
        return True


class _NotHealthy(Exception):
    """The cluster is not healthy yet (retried by ``wait_until``, reported on timeout)."""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # redis-cli --cluster colours its output even into a pipe


def _remaining(deadline: float) -> float:
    return max(round(deadline - time.monotonic(), 2), 0.1)


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

    ``env`` adds variables to the agent's environment (e.g.
    ``FLUXON_METRICS_TOKEN``); ``nofile`` runs it with that RLIMIT_NOFILE
    (soft and hard), as ``ulimit -n`` would, to test descriptor exhaustion.
    """

    def __init__(self, config_path: str | os.PathLike[str], args: Sequence[str] = (),
                 port: int | None = None,
                 tls: tuple[str | os.PathLike[str], str | os.PathLike[str]] | None = None,
                 env: dict[str, str] | None = None, nofile: int | None = None) -> None:
        self.config_path = Path(config_path)
        self.args = list(args)
        self.port = port if port is not None else free_port()
        self.proc = None
        self.log = self.config_path.with_suffix(f".{self.port}.log")
        self.tls = (str(tls[0]), str(tls[1])) if tls is not None else None
        self.env = dict(env or {})
        self.nofile = nofile

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

        def healthy() -> bool:
            with urllib.request.urlopen(self.url + "/healthz", timeout=1,
                                        context=context) as response:
                return response.read() == b"ok"

        nofile = self.nofile

        def limit_descriptors() -> None:  # in the child, before exec
            import resource

            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self._launch([sys.executable, "-m", "fluxon_video", "agent", "--config",
                      str(self.config_path), "--listen", f"{LOOPBACK}:{self.port}", *tls_args,
                      *self.args], "the agent", healthy, timeout,
                     env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
                     preexec_fn=limit_descriptors if nofile is not None else None)
        return self


class S3Server(_Server):
    """moto's standalone S3 server on a free loopback port (buckets in memory).

    ``stop()`` loses every bucket; ``start()`` after it keeps the port. Its
    output goes to ``workdir/moto-<port>.log``.
    """

    REGION = "us-east-1"
    KEY_ID, SECRET = "fluxon-test-key", "fluxon-test-secret"  # moto checks no signature

    def __init__(self, workdir: str | os.PathLike[str], port: int | None = None) -> None:
        self.workdir = Path(workdir)
        self.port = port if port is not None else free_port()
        self.proc = None
        self.log = self.workdir / f"moto-{self.port}.log"

    @property
    def url(self) -> str:
        """The endpoint, ``http://127.0.0.1:<port>``."""
        return f"http://{LOOPBACK}:{self.port}"

    def store_options(self) -> dict[str, str | bool]:
        """An export's ``store`` table for this server (``root = "s3://bucket/prefix"``)."""
        return {"endpoint": self.url, "region": self.REGION, "access_key_id": self.KEY_ID,
                "secret_access_key": self.SECRET, "allow_http": True}

    def start(self, timeout: float = 30.0) -> S3Server:
        """Start the server and wait until it lists buckets. Returns ``self``."""
        if self.running:
            return self
        self.workdir.mkdir(parents=True, exist_ok=True)

        def lists() -> bool:
            with urllib.request.urlopen(self.url + "/", timeout=1) as response:
                return response.status == 200

        self._launch([sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(self.port)],
                     "the S3 server", lists, timeout)
        return self

    def client(self) -> Any:
        """A boto3 S3 client of this server (for setting up and changing objects)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.url, region_name=self.REGION,
                            aws_access_key_id=self.KEY_ID, aws_secret_access_key=self.SECRET)

    def upload(self, bucket: str, objects: dict[str, bytes | Path]) -> None:
        """Create ``bucket`` if needed and put ``{key: bytes or a local file}`` in it."""
        client = self.client()
        if bucket not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
            client.create_bucket(Bucket=bucket)
        for key, body in objects.items():
            data = body.read_bytes() if isinstance(body, Path) else body
            client.put_object(Bucket=bucket, Key=key, Body=data)
