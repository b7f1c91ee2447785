"""What one process's FluxonFS client owns, and the few calls every service makes on it.

Nothing of it survives fork: a child builds its own on first use (the
parent's threads do not exist there and its locks may be held).
"""

from __future__ import annotations

import concurrent.futures
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import cachetools

from fluxon_video import errors
from fluxon_video.fs import tokens
from fluxon_video.fs.concurrency import Backfiller, PendingWrites, SingleFlight
from fluxon_video.fs.config import FluxonFsConfig, FluxonFsExport
from fluxon_video.fs.counters import ReadCounters
from fluxon_video.fs.file_ref import VersionedFile
from fluxon_video.fs.kv import (
    EmbeddedPieceStore,
    DAMAGED,
    Fields,
    GuardedPieceStore,
    PieceStore,
    RedisClusterPieceStore,
    RedisPieceStore,
)
from fluxon_video.fs.kv_seal import CORRUPT, EntrySealer, Protection, Verdict, load_secrets
from fluxon_video.fs.origin import FileStat
from fluxon_video.fs.routes import AgentRoute, InProcessRoute, ReplicatedRoute, Route
from fluxon_video.fs.storage import ExportStorage
from fluxon_video.logs import RateLimited, get_logger

log = get_logger("client")
warn = RateLimited(log)

# Heads asked at once; an open whose head waits in the queue past its stat
# cancels it and reads the head as a cold open did before.
HEAD_WORKERS = 4


def make_piece_store(config: FluxonFsConfig) -> PieceStore:
    settings = config.client
    if settings.redis_cluster:
        return RedisClusterPieceStore(settings.redis_urls, settings.redis_timeout_s,
                                      settings.redis_retry_after_s, settings.redis_ca_bundle)
    if settings.redis_url:
        return RedisPieceStore(settings.redis_urls[0], settings.redis_timeout_s,
                               settings.redis_ca_bundle)
    return EmbeddedPieceStore(settings.embedded_kv_max_bytes)


def make_sealer(config: FluxonFsConfig, shared: bool) -> EntrySealer:
    """What seals this process's KV entries: the configured keys for a shared KV
    (refusing to run without them), a key of its own for the in-process store."""
    if not shared:
        return EntrySealer.ephemeral()
    settings = config.client
    where = f"{config.source}: client" if config.source else "client"
    default = load_secrets(settings.kv_keys, settings.kv_key_file, where)
    per_export = {export.name: load_secrets((), export.kv_key_file, f"exports ({export.name})")
                  for export in config.exports.values() if export.kv_key_file}
    if not default and len(per_export) < len(config.exports):
        raise errors.FluxonFsConfigError(
            f"{where}: a shared KV (redis_url) needs a key that every trainer holds and Redis "
            "never sees, or anyone who reaches Redis could forge or read its entries: make one "
            "with `fluxon-video token new`, then set client.kv_key_file (a file holding it), "
            "client.kv_keys or $FLUXON_KV_KEYS (docs/security.md)")
    return EntrySealer(default, Protection(settings.kv_protection), per_export)


def make_routes(config: FluxonFsConfig) -> dict[str, Route]:
    """Per export, how this process reaches its storage: the agents, or in-process."""
    settings = config.client
    storage = ExportStorage(config)
    return {export.name: (
        InProcessRoute(storage) if export.in_process else
        TokenNamingRoute(ReplicatedRoute(
            [AgentRoute(url, settings.agent_timeout_s, settings.agent_connect_timeout_s,
                        settings.agent_pool_size, settings.agent_ca_bundle)
             for url in export.agent_urls], settings.agent_failover_skip_s,
            settings.agent_retry_window_s), config))
        for export in config.exports.values()}


class TokenNamingRoute:
    """An agent route whose refusals of the token (401) name the identity whose
    token it is and where the config holds it: "agent URL refused identity
    'alice''s token ([identities] alice in /etc/fluxon/trainer.toml)". (The agent
    cannot: no identity it knows has the token.)"""

    REFUSED = "refused the token"

    def __init__(self, route: Route, config: FluxonFsConfig) -> None:
        self.route = route
        where = config.source or "the config"
        self._whose = {token: f"identity {name!r}'s token ([identities] {name} in {where})"
                       for name, value in config.identities.items()
                       for token in tokens.plain_tokens(value)}

    def _named(self, exc: errors.FluxonFsAuthenticationError, token: str) -> Exception:
        whose = self._whose.get(token)
        if whose is None or self.REFUSED not in str(exc):
            return exc
        named = type(exc)(str(exc).replace(self.REFUSED, f"refused {whose}", 1))
        named.__dict__.update(exc.__dict__)  # (lasting)
        return named

    def stat(self, export: str, relpath: str, token: str, *, wait: bool = True) -> FileStat:
        try:
            return self.route.stat(export, relpath, token, wait=wait)
        except errors.FluxonFsAuthenticationError as exc:
            raise self._named(exc, token) from None

    def stat_head(self, export: str, relpath: str, token: str, length: int, *,
                  wait: bool = True) -> tuple[FileStat, bytes | None]:
        try:
            return self.route.stat_head(export, relpath, token, length, wait=wait)
        except errors.FluxonFsAuthenticationError as exc:
            raise self._named(exc, token) from None

    def list(self, export: str, prefix: str, recursive: bool, pattern: str | None,
             cursor: str | None, limit: int, token: str) -> tuple[list, str | None]:
        try:
            return self.route.list(export, prefix, recursive, pattern, cursor, limit, token)
        except errors.FluxonFsAuthenticationError as exc:
            raise self._named(exc, token) from None

    def read_chunk(self, export: str, relpath: str, offset: int, length: int,
                   expected: FileStat, token: str) -> bytes:
        try:
            return self.route.read_chunk(export, relpath, offset, length, expected, token)
        except errors.FluxonFsAuthenticationError as exc:
            raise self._named(exc, token) from None

    def close(self) -> None:
        self.route.close()


@dataclass
class ClientState:
    """One process's connections, threads, locks and caches."""

    pid: int
    kv: GuardedPieceStore
    routes: dict[str, Route]
    stats: cachetools.TLRUCache[tuple, tuple[float, FileStat]]
    # (monotonic time, stat) of the last authorised stat, for stale_if_error_s.
    last_good: cachetools.LRUCache[tuple, tuple[float, FileStat]]
    # When this process last pushed a KV entry's expiry back (cache_ttl_s).
    ttl_refreshed: cachetools.LRUCache[str, float]
    lock: threading.Lock
    flights: SingleFlight
    backfill: Backfiller
    # What the backfill and the blob writes hold until the KV has it.
    pending: PendingWrites
    # KV reads while the agent answers a stat (open_file), and the writes
    # nobody waits for (a shared stat, an index blob); close() waits for them.
    alongside: concurrent.futures.ThreadPoolExecutor
    # A cold open's stat with the file's head, asked beside the plain stat once
    # the KV has no index for the file (fs/file_metadata.py).
    heads: concurrent.futures.ThreadPoolExecutor
    # Who this process is in the claims on fetching a piece (fs/shared_fetch.py).
    owner: str
    # Seals and opens every KV entry (fs/kv_seal.py).
    seal: EntrySealer

    @classmethod
    def build(cls, config: FluxonFsConfig, store: PieceStore | None) -> ClientState:
        settings = config.client
        store = store if store is not None else make_piece_store(config)
        return cls(
            pid=os.getpid(),
            kv=GuardedPieceStore(store, settings.redis_retry_after_s,
                                 settings.redis_slow_ms / 1000),
            routes=make_routes(config),
            stats=cachetools.TLRUCache(maxsize=65536, ttu=lambda _key, value, now: value[0],
                                       timer=time.monotonic),
            last_good=cachetools.LRUCache(maxsize=65536),
            ttl_refreshed=cachetools.LRUCache(maxsize=262144),
            lock=threading.Lock(),
            flights=SingleFlight(),
            backfill=Backfiller(settings.backfill_workers, settings.backfill_queue_size),
            pending=PendingWrites(),
            alongside=concurrent.futures.ThreadPoolExecutor(
                max_workers=2, thread_name_prefix="fluxon-alongside"),
            heads=concurrent.futures.ThreadPoolExecutor(
                max_workers=HEAD_WORKERS, thread_name_prefix="fluxon-head"),
            owner=f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}",
            seal=make_sealer(config, store.shared))

    def refresh_ttl(self, export: FluxonFsExport, key: str) -> None:
        """Push a hit entry's expiry back, at most once per half TTL per key and process."""
        if not export.cache_ttl_s:
            return
        now = time.monotonic()
        with self.lock:
            last = self.ttl_refreshed.get(key)
            if last is not None and now - last < export.cache_ttl_s / 2:
                return
            self.ttl_refreshed[key] = now
        self.kv.touch(key, export.cache_ttl_s)

    def put_verified(self, export: FluxonFsExport, key: str, data: bytes) -> bool:
        """Store data under key as a sealed entry, with the export's TTL; False if refused."""
        return self.kv.put(key, self.seal.seal(export.name, key, data,
                                               export.cache_bytes_field_key),
                           export.cache_ttl_s)

    def open_entry(self, export: FluxonFsExport, key: str, entry: Fields | None,
                   counters: ReadCounters | None, *, bound: str = "",
                   expected_len: int | None = None, what: str = "") -> bytes | None:
        """An entry's verified bytes, None for a miss. A corrupt one (sealed with
        a key we hold, failing its check) is deleted and counted."""
        opened = (CORRUPT if entry is DAMAGED else
                  self.seal.open(export.name, key, entry, export.cache_bytes_field_key, bound,
                                 expected_len))
        if opened.verdict is Verdict.CORRUPT:
            self.kv.delete(key)
            if counters is not None:
                counters.add(kv_corrupt=1)
            warn.warning("corrupt", "%sKV entry %s failed verification (damaged or forged); "
                         "deleted and read again", f"{what}: " if what else "", key)
        elif opened.verdict is Verdict.FOREIGN:
            warn.warning("foreign", "KV entry %s is in the old format or sealed with a key "
                         "this process does not hold: read again and rewritten", key)
        return opened.data

    def remote_read(self, file: VersionedFile, offset: int, length: int,
                    counters: ReadCounters) -> bytes:
        """Bytes of this version from the export's route (which checks identity and version)."""
        start = time.perf_counter()
        try:
            data = self.routes[file.export].read_chunk(file.export, file.relpath, offset, length,
                                                      file.version, file.identity.token)
            self.kv.observe_origin(time.perf_counter() - start)
        except errors.FluxonFsIOError as exc:
            warn.warning("agent", "%s: reading %d bytes at %d failed: %s", file.name, length,
                         offset, exc)
            raise
        counters.add(remote_reads=1, remote_bytes=len(data))
        return data

    def close(self) -> None:
        self.alongside.shutdown(wait=True)
        self.heads.shutdown(wait=True, cancel_futures=True)
        self.backfill.close()
        for route in self.routes.values():
            route.close()
        self.kv.close()


class ClientService:
    """A service of the client: the config, this process's state, and the grant
    that the versions its client authorised carry (fs/file_metadata.py)."""

    def __init__(self, config: FluxonFsConfig, state: Callable[[], ClientState],
                 grant: object) -> None:
        self.config = config
        self._state = state
        self._grant = grant
