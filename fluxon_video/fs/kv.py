"""KV piece stores: Redis (shared by every node) or an in-process LRU.

A piece is one hash: the bytes under the export's ``cache_bytes_field_key``,
plus ``len`` and ``crc32``, a CRC-32 over the entry's own key and then its
bytes; every hit is verified against both before use, so damaged bytes and
an entry moved or copied under another key read as corrupt.
Redis trouble never fails a read: GuardedPieceStore turns connection errors
and timeouts into misses and opens a circuit for a while, then tries again.
An entry of the wrong type or a refused write (Redis full under
``noeviction``) is not Redis being down: the circuit stays closed.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Mapping
from typing import Protocol

import cachetools
import redis
import redis.exceptions

from fluxon_video.fs.storage import FileStat
from fluxon_video.logs import RateLimited, get_logger

log = get_logger("kv")

Fields = Mapping[str, bytes]


def _version(version: FileStat) -> str:
    # Every part of the version: a rewrite that restores size and mtime still
    # has another ctime (or inode), so its pieces never share a key.
    return f"{version.size}:{version.mtime_ns}:{version.ctime_ns}:{version.inode}"


def piece_key(prefix: str, export: str, relpath: str, version: FileStat, piece_size: int,
              index: int) -> str:
    """The KV key of one piece. Strings are length-prefixed, so no two tuples collide."""
    return (f"{prefix}:piece:{len(export)}:{export}:{len(relpath.encode())}:{relpath}:"
            f"{_version(version)}:{piece_size}:{index}")


def blob_key(prefix: str, kind: str, export: str, relpath: str, version: FileStat) -> str:
    """The KV key of a per-file-version blob (e.g. the frame index), same encoding."""
    return (f"{prefix}:{kind}:{len(export)}:{export}:{len(relpath.encode())}:{relpath}:"
            f"{_version(version)}")


def _checksum(key: str, data: bytes) -> int:
    return zlib.crc32(data, zlib.crc32(key.encode()))


def encode_piece(key: str, data: bytes, bytes_field: str) -> dict[str, bytes]:
    """The entry stored under key: bytes, length and a checksum bound to key."""
    return {bytes_field: data, "len": str(len(data)).encode(),
            "crc32": str(_checksum(key, data)).encode()}


def decode_piece(key: str, fields: Fields | None, bytes_field: str,
                 expected_len: int | None) -> bytes | None:
    """The entry's bytes if it is whole, intact, written for key (and expected_len
    long), else None."""
    if not fields:
        return None
    try:
        data = fields[bytes_field]
        if int(fields["len"]) != len(data) or expected_len not in (None, len(data)):
            return None
        if int(fields["crc32"]) != _checksum(key, data):
            return None
    except (KeyError, ValueError, TypeError):
        return None
    return bytes(data)


# What a store returns for a key holding something that is not a piece entry
# (a Redis STRING or LIST, say): present, and fails verification like corruption.
DAMAGED: Fields = {"damaged": b""}


class PieceStore(Protocol):
    def get(self, key: str) -> Fields | None: ...

    def put(self, key: str, fields: Fields) -> None: ...

    def delete(self, key: str) -> None: ...

    def exists(self, key: str) -> bool: ...

    def close(self) -> None: ...


class EmbeddedPieceStore:
    """A bounded in-process LRU: the default when no Redis URL is configured."""

    def __init__(self, max_bytes: int) -> None:
        self._cache: cachetools.LRUCache[str, dict[str, bytes]] = cachetools.LRUCache(
            maxsize=max_bytes, getsizeof=lambda fields: sum(len(v) for v in fields.values()) + 64)
        self._lock = threading.Lock()

    def get(self, key: str) -> Fields | None:
        with self._lock:
            return self._cache.get(key)

    def put(self, key: str, fields: Fields) -> None:
        with self._lock:
            try:
                self._cache[key] = dict(fields)
            except ValueError:  # a single piece larger than the whole store
                pass

    def delete(self, key: str) -> None:
        with self._lock:
            self._cache.pop(key, None)

    def exists(self, key: str) -> bool:
        with self._lock:
            return key in self._cache

    def close(self) -> None:
        with self._lock:
            self._cache.clear()


class RedisPieceStore:
    """Pieces in Redis or Redis Cluster via redis-py (hiredis parser when installed).

    redis-py's connection pool checks its pid and reconnects after fork.
    """

    def __init__(self, url: str, timeout_s: float, cluster: bool = False) -> None:
        options = dict(socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                       retry_on_timeout=False)
        if cluster:
            self._redis = redis.RedisCluster.from_url(url, **options)
        else:
            self._redis = redis.Redis.from_url(url, **options)
        self.url = url

    def get(self, key: str) -> Fields | None:
        try:
            raw = self._redis.hgetall(key)
        except redis.exceptions.ResponseError as exc:
            if str(exc).startswith("WRONGTYPE"):
                return DAMAGED  # deleted and rewritten by the client
            raise
        return {k.decode(): v for k, v in raw.items()} if raw else None

    def put(self, key: str, fields: Fields) -> None:
        self._redis.hset(key, mapping=dict(fields))

    def delete(self, key: str) -> None:
        self._redis.delete(key)

    def exists(self, key: str) -> bool:
        return bool(self._redis.exists(key))

    def close(self) -> None:
        self._redis.close()


class GuardedPieceStore:
    """Wraps a store so its failures become misses; a circuit skips it for a while.

    After a failure the store is bypassed for ``retry_after_s``; the next call
    after that tries it again (one probe), closing the circuit on success.
    """

    KV_ERRORS = (redis.exceptions.RedisError, OSError)
    # Answers from a healthy server (WRONGTYPE, OOM under noeviction, ...): the
    # call failed, Redis is not down. Loading/busy replies are connection errors.
    SERVER_REFUSALS = (redis.exceptions.ResponseError,)

    def __init__(self, store: PieceStore, retry_after_s: float) -> None:
        self.store = store
        self.retry_after_s = retry_after_s
        self._open_until = 0.0
        self._tripped = False  # the circuit opened and no call has succeeded since
        self._refusals = RateLimited(log)

    @property
    def circuit_open(self) -> bool:
        return time.monotonic() < self._open_until

    def _call(self, fn, *args):
        if self.circuit_open:
            return False, None
        try:
            result = fn(*args)
        except self.SERVER_REFUSALS as exc:
            self._refusals.warning("refused", "the KV refused a %s: %s", fn.__name__, exc)
            return False, None
        except self.KV_ERRORS as exc:
            self._open_until = time.monotonic() + self.retry_after_s
            if not self._tripped:
                self._tripped = True
                log.warning("the KV %s is unreachable (%s: %s): reads go to the agent; "
                            "trying it again in %.1f s", self._name, type(exc).__name__, exc,
                            self.retry_after_s)
            return False, None
        if self._tripped:
            self._tripped = False
            log.info("the KV %s answers again: reads use it", self._name)
        return True, result

    @property
    def _name(self) -> str:
        return getattr(self.store, "url", "(in-process)")

    def get(self, key: str) -> tuple[bool, Fields | None]:
        """(reachable, fields): reachable False means the KV was skipped or failed."""
        return self._call(self.store.get, key)

    def put(self, key: str, fields: Fields) -> bool:
        return self._call(self.store.put, key, fields)[0]

    def delete(self, key: str) -> bool:
        return self._call(self.store.delete, key)[0]

    def exists(self, key: str) -> tuple[bool, bool]:
        """(reachable, present)."""
        reachable, present = self._call(self.store.exists, key)
        return reachable, bool(present)

    def close(self) -> None:
        self.store.close()
