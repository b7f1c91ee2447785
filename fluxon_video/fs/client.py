"""The FluxonFS client in the training process.

read_range is the one read path the video reader uses:

    authorised stat (metadata cache, per identity, export TTL)
      -> KV piece cache (verified; bypassed for files over cache_max_bytes)
      -> on a miss, the export's miss policy:
           RemoteRead         read the range from the route; backfill the piece later
           StageToKvThenRead  fetch the whole piece, store it, serve from it
      -> route: the agent over HTTP, or the export in-process

Concurrent misses for one piece are fetched once per process (SingleFlight).
Backfill is bounded and deduplicated and drops work when full; no read waits
for it.
"""

from __future__ import annotations

import concurrent.futures
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, fields
from functools import partial
from typing import Any, TypeVar

import cachetools

from fluxon_video import errors
from fluxon_video.fs.config import FluxonFsConfig, FluxonFsExport, MissPolicy, RequestIdentity
from fluxon_video.fs.kv import (
    UNREACHABLE,
    EmbeddedPieceStore,
    Fields,
    GuardedPieceStore,
    PieceStore,
    RedisClusterPieceStore,
    RedisPieceStore,
    blob_key,
    decode_blob,
    decode_piece,
    decode_stat,
    encode_blob,
    encode_piece,
    encode_stat,
    piece_key,
    stat_key,
)
from fluxon_video.fs.listing import FluxonFsFileEntry
from fluxon_video.fs.routes import (
    AgentRoute,
    InProcessRoute,
    ReplicatedRoute,
    Route,
    is_unreachable,
)
from fluxon_video.fs.storage import ExportStorage, FileStat
from fluxon_video.logs import RateLimited, get_logger

T = TypeVar("T")
log = get_logger("client")
_warn = RateLimited(log)


@dataclass
class ReadCounters:
    """What a reader's range reads cost, counted as they happen."""

    kv_hits: int = 0
    kv_misses: int = 0
    kv_bytes: int = 0  # bytes served by hits
    kv_round_trips: int = 0  # KV reads: one per range (its pieces go in one pipeline), one per blob
    stat_requests: int = 0  # stats asked of the agent (not served by a metadata cache)
    kv_errors: int = 0  # KV unreachable or skipped by the open circuit
    kv_corrupt: int = 0  # entries that failed verification and were deleted
    remote_reads: int = 0
    remote_bytes: int = 0
    backfills_queued: int = 0
    backfills_dropped: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class OpenedFile:
    """What opening a file learnt: its version, its blob of the kind asked for
    (None: absent), and the network round trips that took one after another."""

    version: FileStat
    blob: bytes | None
    round_trips: int


class SingleFlight:
    """Runs one call per key at a time; concurrent callers share its result."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[Hashable, concurrent.futures.Future[Any]] = {}

    def do(self, key: Hashable, fn: Callable[[], T]) -> tuple[T, bool]:
        """(result, ran): ran is False when another caller's result was shared."""
        with self._lock:
            future = self._calls.get(key)
            leader = future is None
            if leader:
                future = self._calls[key] = concurrent.futures.Future()
        if not leader:
            return future.result(), False
        try:
            result = fn()
        except BaseException as exc:
            future.set_exception(exc)
            raise
        else:
            future.set_result(result)
            return result, True
        finally:
            with self._lock:
                del self._calls[key]


class Backfiller:
    """Bounded, deduplicated background work; drops jobs when the queue is full."""

    def __init__(self, workers: int, queue_size: int) -> None:
        self._queue: queue.Queue[tuple[str, Callable[[], None]] | None] = queue.Queue(queue_size)
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, name=f"fluxon-backfill-{i}", daemon=True)
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()
        self.done = 0

    def submit(self, key: str, job: Callable[[], None]) -> bool | None:
        """True queued, None already pending, False dropped (queue full)."""
        with self._lock:
            if key in self._pending:
                return None
            try:
                self._queue.put_nowait((key, job))
            except queue.Full:
                return False
            self._pending.add(key)
            return True

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            key, job = item
            try:
                job()
                self.done += 1
            except Exception:  # noqa: BLE001 - a backfill is an optimisation; reads retry
                pass
            finally:
                with self._lock:
                    self._pending.discard(key)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """For tests and demos: wait until nothing is queued or running."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._pending:
                    return True
            time.sleep(0.005)
        return False

    def close(self) -> None:
        for _ in self._threads:
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                break
        for thread in self._threads:
            thread.join(timeout=5)


def make_piece_store(config: FluxonFsConfig) -> PieceStore:
    settings = config.client
    if settings.redis_cluster:
        return RedisClusterPieceStore(settings.redis_urls, settings.redis_timeout_s,
                                      settings.redis_retry_after_s)
    if settings.redis_url:
        return RedisPieceStore(settings.redis_urls[0], settings.redis_timeout_s)
    return EmbeddedPieceStore(settings.embedded_kv_max_bytes)


@dataclass
class _ProcessState:
    """What one process's client owns: connections, threads, locks, caches.

    Nothing of it survives fork: a child builds its own on first use (the
    parent's threads do not exist there and its locks may be held).
    """

    pid: int
    kv: GuardedPieceStore
    routes: dict[str, Route]
    stats: cachetools.TLRUCache[tuple, tuple[float, FileStat]]
    # (monotonic time, stat) of the last authorised stat, for stale_if_error_s.
    last_good: cachetools.LRUCache[tuple, tuple[float, FileStat]]
    # When this process last pushed a KV entry's expiry back (cache_ttl_s).
    ttl_refreshed: cachetools.LRUCache[str, float]
    stats_lock: threading.Lock
    flights: SingleFlight
    backfill: Backfiller
    # KV reads while the agent answers a stat (open_file), and the writes
    # nobody waits for (a shared stat, an index blob); close() waits for them.
    alongside: concurrent.futures.ThreadPoolExecutor

    def close(self) -> None:
        self.alongside.shutdown(wait=True)
        self.backfill.close()
        for route in self.routes.values():
            route.close()
        self.kv.close()


class FluxonFsClient:
    """Metadata cache, KV piece cache, miss policies and backfill over the routes.

    Fork-safe in the style of redis-py's connection pool: every entry point
    checks the pid first, and a forked child builds its own connections,
    threads and caches without touching the parent's.
    """

    def __init__(self, config: FluxonFsConfig, store: PieceStore | None = None) -> None:
        self.config = config
        self._piece_store = store  # None: make one per process from the config
        self._state: _ProcessState | None = None
        self._closed = False

    def _build_state(self) -> _ProcessState:
        settings = self.config.client
        storage = ExportStorage(self.config)
        routes: dict[str, Route] = {}
        for export in self.config.exports.values():
            routes[export.name] = (
                InProcessRoute(storage) if export.in_process else
                ReplicatedRoute([AgentRoute(url, settings.agent_timeout_s,
                                            settings.agent_connect_timeout_s,
                                            settings.agent_pool_size, settings.agent_ca_bundle)
                                 for url in export.agent_urls], settings.agent_failover_skip_s))
        store = self._piece_store if self._piece_store is not None else make_piece_store(self.config)
        return _ProcessState(
            pid=os.getpid(),
            kv=GuardedPieceStore(store, settings.redis_retry_after_s),
            routes=routes,
            stats=cachetools.TLRUCache(maxsize=65536, ttu=lambda _key, value, now: value[0],
                                       timer=time.monotonic),
            last_good=cachetools.LRUCache(maxsize=65536),
            ttl_refreshed=cachetools.LRUCache(maxsize=262144),
            stats_lock=threading.Lock(),
            flights=SingleFlight(),
            backfill=Backfiller(settings.backfill_workers, settings.backfill_queue_size),
            alongside=concurrent.futures.ThreadPoolExecutor(
                max_workers=2, thread_name_prefix="fluxon-alongside"))

    def _checkpid(self) -> _ProcessState:
        """This process's state, built on first use here (after fork too)."""
        state = self._state
        if state is None or state.pid != os.getpid():
            if self._closed:
                raise errors.FluxonFsClosedError("the FluxonFS client is closed")
            state = self._state = self._build_state()
        return state

    @property
    def kv(self) -> GuardedPieceStore:
        return self._checkpid().kv

    @property
    def backfill(self) -> Backfiller:
        return self._checkpid().backfill

    # ---- metadata ----

    def stat(self, identity: RequestIdentity, export_name: str, relpath: str,
             counters: ReadCounters | None = None) -> FileStat:
        """The file's version as seen by identity; cached for the export's TTL
        (in this process, and with metadata_cache_shared in the KV too)."""
        export = self.config.export(export_name)
        cached = self._cached_stat(identity, export_name, relpath)
        if cached is not None:
            return cached
        if export.metadata_cache_shared:
            skey = self._stat_key(export, relpath, identity)
            reachable, entry = self.kv.get(skey)
            if reachable and counters is not None:
                counters.add(kv_round_trips=1)
            shared = self._shared_stat(identity, export, relpath, skey, entry)
            if shared is not None:
                return shared
        return self._agent_stat(identity, export, relpath, counters)

    def open_file(self, identity: RequestIdentity, export_name: str, relpath: str,
                  kind: str, counters: ReadCounters) -> OpenedFile:
        """The file's version and its blob of ``kind``, in one round trip where the
        caches allow: with a stat cached in this process, one KV read; with
        metadata_cache_shared, the stat another process had authorised for this
        identity comes in the same KV pipeline as the blob (no agent request);
        otherwise the blob is read while the agent answers the stat. The blob
        is only returned after the stat (fetched alongside, never used before).
        """
        export = self.config.export(export_name)
        bkey = blob_key(export.cache_kv_key_prefix, kind, export_name, relpath)
        version = self._cached_stat(identity, export_name, relpath)
        entry: Fields | None = None
        fetched = False
        trips = kv_reads = 0  # one after another; KV reads that were answered
        if version is None and export.metadata_cache_shared:
            skey = self._stat_key(export, relpath, identity)
            reachable, (stat_entry, entry) = self.kv.get_many([skey, bkey])
            fetched = reachable and entry is not UNREACHABLE
            trips, kv_reads = 1, int(reachable)
            version = self._shared_stat(identity, export, relpath, skey, stat_entry)
        if version is None:
            pending = None if fetched else self._checkpid().alongside.submit(self.kv.get, bkey)
            try:
                version = self._agent_stat(identity, export, relpath, counters)
            finally:
                if pending is not None:
                    reachable, entry = pending.result()
                    fetched = reachable
                    kv_reads += int(reachable)
            trips += 1  # the stat (the blob read alongside)
        if version.size > export.cache_max_bytes:  # the file stays out of the KV entirely
            counters.add(kv_round_trips=kv_reads)
            return OpenedFile(version, None, trips)
        if not fetched:
            reachable, entry = self.kv.get(bkey)
            trips += 1
            kv_reads += int(reachable)
        counters.add(kv_round_trips=kv_reads)
        return OpenedFile(version, self._blob_from_entry(export, bkey, version, entry), trips)

    def _cached_stat(self, identity: RequestIdentity, export_name: str,
                     relpath: str) -> FileStat | None:
        state = self._checkpid()
        with state.stats_lock:
            cached = state.stats.get((identity, export_name, relpath))
        return None if cached is None else cached[1]

    def _stat_key(self, export: FluxonFsExport, relpath: str, identity: RequestIdentity) -> str:
        return stat_key(export.cache_kv_key_prefix, export.name, relpath, identity.token)

    def _shared_stat(self, identity: RequestIdentity, export: FluxonFsExport, relpath: str,
                     skey: str, entry: Fields | None) -> FileStat | None:
        """A stat the agent authorised for this identity in some process, while it
        is younger than metadata_cache_ttl_ms; cached here for what is left."""
        if entry is UNREACHABLE:
            return None
        shared = decode_stat(skey, entry, export.cache_bytes_field_key, time.time())
        if shared is None:
            return None
        version, left = shared
        state = self._checkpid()
        with state.stats_lock:
            state.stats[(identity, export.name, relpath)] = (time.monotonic() + left, version)
        return version

    def _agent_stat(self, identity: RequestIdentity, export: FluxonFsExport, relpath: str,
                    counters: ReadCounters | None) -> FileStat:
        state = self._checkpid()
        key = (identity, export.name, relpath)
        if counters is not None:
            counters.add(stat_requests=1)
        try:
            st = state.routes[export.name].stat(export.name, relpath, identity.token)
        except errors.FluxonFsIOError as exc:
            stale = self._stale_stat(state, export, key, exc)
            if stale is None:
                if is_unreachable(exc):
                    _warn.warning("agent", "%s:%s: stat failed: %s", export.name, relpath, exc)
                raise
            _warn.warning("stale", "%s:%s: no agent answers (%s); serving the stat authorised "
                          "%.1f s ago (stale_if_error_s)", export.name, relpath, exc,
                          time.monotonic() - state.last_good[key][0])
            return stale
        now = time.monotonic()
        ttl = export.metadata_cache_ttl_ms / 1000
        with state.stats_lock:
            if ttl > 0:
                state.stats[key] = (now + ttl, st)
            if export.stale_if_error_s > 0:
                state.last_good[key] = (now, st)
        if ttl > 0 and export.metadata_cache_shared:
            # Shared for other processes; nobody here waits for the write.
            skey = self._stat_key(export, relpath, identity)
            state.alongside.submit(self.kv.put, skey, encode_stat(
                skey, st, time.time() + ttl, export.cache_bytes_field_key), math.ceil(ttl))
        return st

    def _stale_stat(self, state: _ProcessState, export: FluxonFsExport, key: tuple,
                    exc: errors.FluxonFsIOError) -> FileStat | None:
        """With stale_if_error_s, the last authorised stat while no agent answers."""
        if export.stale_if_error_s <= 0 or not is_unreachable(exc):
            return None
        with state.stats_lock:
            good = state.last_good.get(key)
        if good is None or time.monotonic() - good[0] > export.stale_if_error_s:
            return None
        return good[1]

    def check_version(self, identity: RequestIdentity, export_name: str, relpath: str,
                      version: FileStat) -> None:
        """Raise FluxonFsFileChangedError if the file is no longer at version."""
        current = self.stat(identity, export_name, relpath)
        if current != version:
            raise errors.FluxonFsFileChangedError(
                f"{export_name}:{relpath}: the file changed since the reader opened it "
                f"({version.describe_change(current)})")

    def list_files(self, identity: RequestIdentity, export_name: str, prefix: str = "",
                   recursive: bool = True, pattern: str | None = None,
                   page_size: int = 1000) -> Iterator[FluxonFsFileEntry]:
        """The export's files under prefix, fetched a page at a time as you iterate."""
        self.config.export(export_name)
        cursor: str | None = None
        while True:
            entries, cursor = self._checkpid().routes[export_name].list(
                export_name, prefix, recursive, pattern, cursor, page_size, identity.token)
            yield from entries
            if cursor is None:
                return

    # ---- the range read ----

    def read_range(self, identity: RequestIdentity, export_name: str, relpath: str,
                   version: FileStat, offset: int, length: int, counters: ReadCounters, *,
                   stage_partial: bool = True) -> bytes:
        """Bytes [offset, offset+length): pieces from the KV, runs of missing pieces
        in one agent read each, backfilled. A piece the read only partly covers is
        staged by fetching it whole in the background, unless stage_partial is
        False (a small probe of a file's end would otherwise cost a whole piece)."""
        export = self.config.export(export_name)
        if offset < 0 or length < 0 or offset + length > version.size:
            raise errors.FluxonFsBadRequestError(
                f"{export_name}:{relpath}: range {offset}+{length} outside {version.size} bytes")
        if length == 0:
            return b""
        if version.size > export.cache_max_bytes:
            # The agent checks identity and version on every remote read.
            return self._remote(export, relpath, version, offset, length, identity, counters)
        # KV bytes are only served after a stat authorised for this identity.
        self.check_version(identity, export_name, relpath, version)
        ps = export.piece_size
        indices = list(range(offset // ps, (offset + length - 1) // ps + 1))
        # Every piece of the range in one KV round trip (per node on a cluster).
        pieces = self._pieces_from_kv(export, relpath, version, indices, counters)
        parts = []
        k = 0
        while k < len(indices):
            index, piece = indices[k], pieces[k]
            lo, hi = max(offset, index * ps), min(offset + length, (index + 1) * ps)
            if piece is not None:
                parts.append(piece[lo - index * ps:hi - index * ps])
            elif export.kv_miss_policy is MissPolicy.StageToKvThenRead:
                parts.append(self._stage_piece(export, relpath, version, index, identity,
                                               counters)[lo - index * ps:hi - index * ps])
            else:
                # A run of missing pieces is one read from the agent.
                run = k + 1
                while run < len(indices) and pieces[run] is None:
                    run += 1
                hi = min(offset + length, (indices[run - 1] + 1) * ps)
                parts.append(self._remote_read_with_backfill(
                    export, relpath, version, indices[k:run], lo, hi, identity, counters,
                    stage_partial))
                k = run
                continue
            k += 1
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _piece_len(self, export: FluxonFsExport, version: FileStat, index: int) -> int:
        return min(export.piece_size, version.size - index * export.piece_size)

    def _key(self, export: FluxonFsExport, relpath: str, version: FileStat, index: int) -> str:
        return piece_key(export.cache_kv_key_prefix, export.name, relpath, version,
                         export.piece_size, index)

    def _pieces_from_kv(self, export: FluxonFsExport, relpath: str, version: FileStat,
                        indices: list[int], counters: ReadCounters) -> list[bytes | None]:
        """The verified bytes of each piece, None where the KV cannot serve it."""
        keys = [self._key(export, relpath, version, index) for index in indices]
        reachable, entries = self.kv.get_many(keys)
        if not reachable:
            counters.add(kv_errors=len(keys))
            return [None] * len(keys)
        counters.add(kv_round_trips=1)
        out: list[bytes | None] = []
        for key, index, entry in zip(keys, indices, entries):
            if entry is UNREACHABLE:
                counters.add(kv_errors=1)
                out.append(None)
                continue
            data = decode_piece(key, entry, export.cache_bytes_field_key,
                                self._piece_len(export, version, index))
            if data is None:
                if entry:  # present but damaged: drop it so it gets rewritten
                    self.kv.delete(key)
                    counters.add(kv_corrupt=1)
                    _warn.warning("corrupt", "%s:%s: KV entry %s failed verification; deleted "
                                  "and read again", export.name, relpath, key)
                counters.add(kv_misses=1)
            else:
                counters.add(kv_hits=1, kv_bytes=len(data))
                self._refresh_ttl(export, key)
            out.append(data)
        return out

    def _refresh_ttl(self, export: FluxonFsExport, key: str) -> None:
        """Push a hit entry's expiry back, at most once per half TTL per key and process."""
        if not export.cache_ttl_s:
            return
        state = self._checkpid()
        now = time.monotonic()
        with state.stats_lock:
            last = state.ttl_refreshed.get(key)
            if last is not None and now - last < export.cache_ttl_s / 2:
                return
            state.ttl_refreshed[key] = now
        self.kv.touch(key, export.cache_ttl_s)

    def _remote(self, export: FluxonFsExport, relpath: str, version: FileStat, offset: int,
                length: int, identity: RequestIdentity, counters: ReadCounters) -> bytes:
        try:
            data = self._checkpid().routes[export.name].read_chunk(
                export.name, relpath, offset, length, version, identity.token)
        except errors.FluxonFsIOError as exc:
            _warn.warning("agent", "%s:%s: reading %d bytes at %d failed: %s", export.name,
                          relpath, length, offset, exc)
            raise
        counters.add(remote_reads=1, remote_bytes=len(data))
        return data

    def _store(self, export: FluxonFsExport, relpath: str, version: FileStat, index: int,
               data: bytes) -> bool:
        return self._put(export, self._key(export, relpath, version, index), data)

    def _put(self, export: FluxonFsExport, key: str, data: bytes) -> bool:
        """Store data under key as a verified entry, with the export's TTL; False if refused."""
        return self.kv.put(key, encode_piece(key, data, export.cache_bytes_field_key),
                           export.cache_ttl_s)

    def _stage_piece(self, export: FluxonFsExport, relpath: str, version: FileStat, index: int,
                     identity: RequestIdentity, counters: ReadCounters) -> bytes:
        start, length = index * export.piece_size, self._piece_len(export, version, index)

        def fetch_and_store() -> bytes:
            data = self._remote(export, relpath, version, start, length, identity, counters)
            self._store(export, relpath, version, index, data)
            return data

        data, _ = self._checkpid().flights.do(self._key(export, relpath, version, index),
                                              fetch_and_store)
        return data

    def _remote_read_with_backfill(self, export: FluxonFsExport, relpath: str, version: FileStat,
                                   indices: list[int], lo: int, hi: int,
                                   identity: RequestIdentity, counters: ReadCounters,
                                   stage_partial: bool = True) -> bytes:
        """Bytes [lo, hi) of consecutive missing pieces, in one remote read; each
        piece is backfilled (from these bytes when they hold all of it)."""
        first = self._key(export, relpath, version, indices[0])
        data, _ = self._checkpid().flights.do((first, lo, hi), lambda: self._remote(
            export, relpath, version, lo, hi - lo, identity, counters))
        if not export.async_backfill_enabled:
            return data
        ps = export.piece_size
        for index in indices:
            start, end = index * ps, index * ps + self._piece_len(export, version, index)
            if lo <= start and end <= hi:  # we hold the whole piece: store it, no second fetch
                piece = data[start - lo:end - lo]
                job = partial(self._store, export, relpath, version, index, piece)
            elif not stage_partial:
                continue
            else:
                job = partial(self._stage_piece, export, relpath, version, index, identity,
                              ReadCounters())
            queued = self.backfill.submit(self._key(export, relpath, version, index), job)
            if queued:
                counters.add(backfills_queued=1)
            elif queued is False:
                counters.add(backfills_dropped=1)
        return data

    # ---- warming ----

    def warm_piece(self, identity: RequestIdentity, export_name: str, relpath: str,
                   version: FileStat, index: int, counters: ReadCounters) -> int:
        """Make sure piece ``index`` is in the KV: bytes fetched for it (0: it was there).

        Raises FluxonFsIOError when the KV cannot be reached or refuses the write,
        so a warm run does not report pieces it did not store.
        """
        export = self.config.export(export_name)
        if version.size > export.cache_max_bytes:
            return 0  # the file stays out of the KV
        key = self._key(export, relpath, version, index)
        reachable, present = self.kv.exists(key)
        if not reachable:
            raise errors.FluxonFsIOError(f"{export_name}:{relpath}: the KV is unreachable")
        if present:
            # What a warm run finds stays another TTL, like a piece a read hits.
            self._refresh_ttl(export, key)
            return 0
        start, length = index * export.piece_size, self._piece_len(export, version, index)
        data = self._remote(export, relpath, version, start, length, identity, counters)
        if not self._put(export, key, data):
            raise errors.FluxonFsIOError(f"{export_name}:{relpath}: the KV refused piece {index}")
        return len(data)

    # ---- per-version blobs (opaque to the client; e.g. a frame index) ----

    def load_blob(self, identity: RequestIdentity, export_name: str, relpath: str,
                  version: FileStat, kind: str) -> bytes | None:
        """A blob stored for this file version, after an authorised stat; None if absent."""
        export = self.config.export(export_name)
        self.check_version(identity, export_name, relpath, version)
        if version.size > export.cache_max_bytes:  # the file stays out of the KV entirely
            return None
        key = blob_key(export.cache_kv_key_prefix, kind, export_name, relpath)
        reachable, entry = self.kv.get(key)
        return self._blob_from_entry(export, key, version, entry if reachable else None)

    def _blob_from_entry(self, export: FluxonFsExport, key: str, version: FileStat,
                         entry: Fields | None) -> bytes | None:
        if entry is UNREACHABLE:
            return None
        data, damaged = decode_blob(key, version, entry, export.cache_bytes_field_key)
        if damaged:
            self.kv.delete(key)
        elif data is not None:
            self._refresh_ttl(export, key)  # as for pieces: an index in use does not expire
        return data

    def store_blob(self, export_name: str, relpath: str, version: FileStat, kind: str,
                   data: bytes) -> None:
        """Store this version's blob of kind (replacing any other version's), in the
        background: the caller does not wait (close() does, for the writes queued)."""
        export = self.config.export(export_name)
        if version.size > export.cache_max_bytes:
            return
        key = blob_key(export.cache_kv_key_prefix, kind, export_name, relpath)
        self._checkpid().alongside.submit(
            self.kv.put, key, encode_blob(key, version, data, export.cache_bytes_field_key),
            export.cache_ttl_s)

    def close(self) -> None:
        """Stop this process's threads and connections; later calls raise. Safe to call twice."""
        self._closed = True
        state, self._state = self._state, None
        if state is not None and state.pid == os.getpid():
            state.close()


class FluxonFsRangeSource:
    """One file version, read for one identity: what a reader's ByteSource fetches from."""

    def __init__(self, client: FluxonFsClient, identity: RequestIdentity, export_name: str,
                 relpath: str, version: FileStat, *,
                 preloaded: tuple[str, bytes | None] | None = None,
                 counters: ReadCounters | None = None) -> None:
        self.client = client
        self.identity = identity
        self.export_name = export_name
        self.relpath = relpath
        self.version = version
        self.size = version.size
        self.name = f"{export_name}:{relpath}"
        self.counters = counters if counters is not None else ReadCounters()
        # (kind, blob or None) fetched with the stat (FluxonFsClient.open_file).
        self._preloaded = preloaded

    def read_range(self, offset: int, length: int) -> bytes:
        return self.client.read_range(self.identity, self.export_name, self.relpath, self.version,
                                      offset, length, self.counters)

    def read_extent(self, offset: int, length: int) -> bytes:
        """Like read_range, for bytes kept apart from the pages (ByteSource.fetch_extent):
        pieces it holds only part of are not staged."""
        return self.client.read_range(self.identity, self.export_name, self.relpath, self.version,
                                      offset, length, self.counters, stage_partial=False)

    def load_blob(self, kind: str) -> bytes | None:
        """The blob of this kind another reader or node stored for this version, if
        any (the one fetched with the stat, the first time it is asked for)."""
        if self._preloaded is not None and self._preloaded[0] == kind:
            blob, self._preloaded = self._preloaded[1], None
            return blob
        self.counters.add(kv_round_trips=1)
        return self.client.load_blob(self.identity, self.export_name, self.relpath, self.version,
                                     kind)

    def store_blob(self, kind: str, data: bytes) -> None:
        self.client.store_blob(self.export_name, self.relpath, self.version, kind, data)

    def __repr__(self) -> str:
        return f"FluxonFsRangeSource({self.name!r}, size={self.size})"
