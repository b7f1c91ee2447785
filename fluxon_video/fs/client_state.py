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
from fluxon_video.fs.concurrency import Backfiller, SingleFlight
from fluxon_video.fs.config import FluxonFsConfig, FluxonFsExport
from fluxon_video.fs.counters import ReadCounters
from fluxon_video.fs.file_ref import VersionedFile
from fluxon_video.fs.kv import (
    EmbeddedPieceStore,
    GuardedPieceStore,
    PieceStore,
    RedisClusterPieceStore,
    RedisPieceStore,
    encode_piece,
)
from fluxon_video.fs.origin import FileStat
from fluxon_video.fs.routes import AgentRoute, InProcessRoute, ReplicatedRoute, Route
from fluxon_video.fs.storage import ExportStorage
from fluxon_video.logs import RateLimited, get_logger

log = get_logger("client")
warn = RateLimited(log)


def make_piece_store(config: FluxonFsConfig) -> PieceStore:
    settings = config.client
    if settings.redis_cluster:
        return RedisClusterPieceStore(settings.redis_urls, settings.redis_timeout_s,
                                      settings.redis_retry_after_s)
    if settings.redis_url:
        return RedisPieceStore(settings.redis_urls[0], settings.redis_timeout_s)
    return EmbeddedPieceStore(settings.embedded_kv_max_bytes)


def make_routes(config: FluxonFsConfig) -> dict[str, Route]:
    """Per export, how this process reaches its storage: the agents, or in-process."""
    settings = config.client
    storage = ExportStorage(config)
    return {export.name: (
        InProcessRoute(storage) if export.in_process else
        ReplicatedRoute([AgentRoute(url, settings.agent_timeout_s,
                                    settings.agent_connect_timeout_s, settings.agent_pool_size,
                                    settings.agent_ca_bundle)
                         for url in export.agent_urls], settings.agent_failover_skip_s))
        for export in config.exports.values()}


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
    # KV reads while the agent answers a stat (open_file), and the writes
    # nobody waits for (a shared stat, an index blob); close() waits for them.
    alongside: concurrent.futures.ThreadPoolExecutor
    # Who this process is in the claims on fetching a piece (fs/shared_fetch.py).
    owner: str

    @classmethod
    def build(cls, config: FluxonFsConfig, store: PieceStore | None) -> ClientState:
        settings = config.client
        return cls(
            pid=os.getpid(),
            kv=GuardedPieceStore(store if store is not None else make_piece_store(config),
                                 settings.redis_retry_after_s),
            routes=make_routes(config),
            stats=cachetools.TLRUCache(maxsize=65536, ttu=lambda _key, value, now: value[0],
                                       timer=time.monotonic),
            last_good=cachetools.LRUCache(maxsize=65536),
            ttl_refreshed=cachetools.LRUCache(maxsize=262144),
            lock=threading.Lock(),
            flights=SingleFlight(),
            backfill=Backfiller(settings.backfill_workers, settings.backfill_queue_size),
            alongside=concurrent.futures.ThreadPoolExecutor(
                max_workers=2, thread_name_prefix="fluxon-alongside"),
            owner=f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}")

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
        """Store data under key as a verified entry, with the export's TTL; False if refused."""
        return self.kv.put(key, encode_piece(key, data, export.cache_bytes_field_key),
                           export.cache_ttl_s)

    def remote_read(self, file: VersionedFile, offset: int, length: int,
                    counters: ReadCounters) -> bytes:
        """Bytes of this version from the export's route (which checks identity and version)."""
        try:
            data = self.routes[file.export].read_chunk(file.export, file.relpath, offset, length,
                                                      file.version, file.identity.token)
        except errors.FluxonFsIOError as exc:
            warn.warning("agent", "%s: reading %d bytes at %d failed: %s", file.name, length,
                         offset, exc)
            raise
        counters.add(remote_reads=1, remote_bytes=len(data))
        return data

    def close(self) -> None:
        self.alongside.shutdown(wait=True)
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
