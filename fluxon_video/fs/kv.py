"""KV piece stores: Redis (shared by every node) or an in-process LRU.

An entry is one hash, sealed by fs/kv_seal.py (encrypted or MAC'd with a
key Redis never sees, bound to the entry's own key): this module holds the
keys and the stores, not what is in the entries.
Redis trouble never fails a read: GuardedPieceStore turns connection errors
and timeouts into misses and opens a circuit for a while, then tries again.
An entry of the wrong type or a refused write (Redis full under
``noeviction``) is not Redis being down: the circuit stays closed.
"""

from __future__ import annotations

import collections
import json
import statistics
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

import cachetools
import redis
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from fluxon_video.fs.origin import FileStat
from fluxon_video.logs import RateLimited, get_logger

log = get_logger("kv")

Fields = Mapping[str, bytes]


def piece_key(prefix: str, export: str, relpath: str, version: FileStat, piece_size: int,
              index: int) -> str:
    """The KV key of one piece. Strings are length-prefixed, so no two tuples collide."""
    return (f"{prefix}:piece:{len(export)}:{export}:{len(relpath.encode())}:{relpath}:"
            f"{version.key()}:{piece_size}:{index}")


def blob_key(prefix: str, kind: str, export: str, relpath: str) -> str:
    """The KV key of a file's blob of one kind (e.g. the frame index), same encoding.

    One key per file, not per version: the entry names its version (see
    encode_blob), so a reader can fetch it before it knows the version, in
    the same round trip as the stat (metadata_cache_shared).
    """
    return f"{prefix}:{kind}:{len(export)}:{export}:{len(relpath.encode())}:{relpath}"


def stat_key(prefix: str, export: str, relpath: str, who: str) -> str:
    """The KV key of a stat the agent authorised for one identity (metadata_cache_shared).

    ``who`` is a keyed hash of the identity's token (EntrySealer.identity_tag):
    only holders of the same token share it, and Redis learns nothing of the
    token, not even its plain hash (an agent's config may hold that).
    """
    return f"{prefix}:stat:{len(export)}:{export}:{len(relpath.encode())}:{relpath}:{who}"


def stat_body(version: FileStat, expires_at: float, written_at: float) -> bytes:
    """A shared stat entry's bytes: the version, when it was authorised and until when
    its writer lets it be used (wall clock)."""
    return json.dumps({**version.as_fields(), "expires_at": expires_at,
                       "written_at": written_at}).encode()


def read_stat_body(body: bytes | None, now: float, ttl_s: float) -> tuple[FileStat, float] | None:
    """(version, seconds it stays usable) of a shared stat's bytes; None if unreadable
    or expired. A reader trusts it no longer than its own TTL after it was written,
    whatever the writer's expiry says."""
    if body is None:
        return None
    try:
        d = json.loads(body)
        written = min(float(d["written_at"]), now)  # a clock ahead buys nothing
        left = min(float(d["expires_at"]), written + ttl_s) - now
        version = FileStat.from_fields(d)
    except (ValueError, KeyError, TypeError):
        return None
    return (version, left) if left > 0 else None


# What a store returns for a key holding something that is not a piece entry
# (a Redis STRING or LIST, say): present, and fails verification like corruption.
DAMAGED: Fields = {"damaged": b""}


# In a get_many result: the key's KV node could not be reached (the rest may be fine).
UNREACHABLE: Fields = {"unreachable": b""}


class NodeDown(Exception):
    """One node of a cluster is being skipped: a miss for its keys, not "the KV is down"."""


# Deletes a claim only if the caller still holds it (a claim that expired and
# was taken by another process is theirs).
_RELEASE = ("if redis.call('get', KEYS[1]) == ARGV[1] then "
            "return redis.call('del', KEYS[1]) else return 0 end")


def claim_key(key: str) -> str:
    """The key of a claim on fetching the entry at key (cross-process single-flight)."""
    return f"{key}:fetching"


class PieceStore(Protocol):
    # Whether other processes see this store's entries (and so its claims).
    shared: bool

    def claim_many(self, keys: Sequence[str], owner: str, ttl_ms: int) -> list[bool]:
        """Per key, whether ``owner`` now holds the claim on fetching it (SET NX
        with a TTL: a claim outlives no holder by more than ttl_ms)."""
        ...

    def release(self, key: str, owner: str) -> None: ...

    def get_many(self, keys: Sequence[str]) -> list[Fields | None]:
        """Entries (None: absent, UNREACHABLE: its node is down), in one round trip per node."""
        ...

    def put(self, key: str, fields: Fields, ttl_s: int | None = None) -> None: ...

    def touch(self, key: str, ttl_s: int) -> None: ...

    def delete(self, key: str) -> None: ...

    def exists(self, key: str) -> bool: ...

    def close(self) -> None: ...


class EmbeddedPieceStore:
    """A bounded in-process LRU: the default when no Redis URL is configured.

    (Entries do not expire: the LRU bound is the lifetime.) No other process
    sees it, so claims are always granted (SingleFlight dedupes in-process).
    """

    shared = False

    def claim_many(self, keys: Sequence[str], owner: str, ttl_ms: int) -> list[bool]:
        return [True] * len(keys)

    def release(self, key: str, owner: str) -> None:
        pass

    def __init__(self, max_bytes: int) -> None:
        self._cache: cachetools.LRUCache[str, dict[str, bytes]] = cachetools.LRUCache(
            maxsize=max_bytes, getsizeof=lambda fields: sum(len(v) for v in fields.values()) + 64)
        self._lock = threading.Lock()

    def get_many(self, keys: Sequence[str]) -> list[Fields | None]:
        with self._lock:
            return [self._cache.get(key) for key in keys]

    def put(self, key: str, fields: Fields, ttl_s: int | None = None) -> None:
        with self._lock:
            try:
                self._cache[key] = dict(fields)
            except ValueError:  # a single piece larger than the whole store
                pass

    def touch(self, key: str, ttl_s: int) -> None:
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


def _entry(raw: object) -> Fields | None:
    """One HGETALL reply of a pipeline (an exception object when the command failed)."""
    if isinstance(raw, redis.exceptions.ResponseError):
        if str(raw).startswith("WRONGTYPE"):
            return DAMAGED  # deleted and rewritten by the client
        raise raw
    if isinstance(raw, Exception):
        raise raw
    return {k.decode(): v for k, v in raw.items()} if raw else None  # type: ignore[union-attr]


def _write(pipe: Any, key: str, fields: Fields, ttl_s: int | None) -> None:
    pipe.delete(key)  # no field of an older entry (another format) stays beside the new ones
    pipe.hset(key, mapping=dict(fields))
    if ttl_s:
        pipe.expire(key, ttl_s)


def tls_options(url: str, ca_bundle: str | None) -> dict[str, Any]:
    """redis-py's TLS options for a rediss:// URL: certificates verified (against
    ca_bundle when given, else the system's trust store)."""
    if urlparse(url).scheme != "rediss":
        return {}
    return {"ssl_cert_reqs": "required", **({"ssl_ca_certs": ca_bundle} if ca_bundle else {})}


def connection_options(url: str, ca_bundle: str | None) -> dict[str, Any]:
    """What a URL says about connecting beyond host and port: ACL user, password, TLS."""
    parsed = urlparse(url)
    options: dict[str, Any] = {}
    if parsed.username:
        options["username"] = unquote(parsed.username)
    if parsed.password:
        options["password"] = unquote(parsed.password)
    if parsed.scheme == "rediss":
        options["ssl"] = True
        options.update(tls_options(url, ca_bundle))
    return options


class RedisPieceStore:
    """Pieces in one Redis server via redis-py (hiredis parser when installed).

    redis-py's connection pool checks its pid and reconnects after fork.
    """

    shared = True

    def __init__(self, url: str, timeout_s: float, ca_bundle: str | None = None) -> None:
        self._redis = redis.Redis.from_url(url, socket_timeout=timeout_s,
                                           socket_connect_timeout=timeout_s, retry_on_timeout=False,
                                           **tls_options(url, ca_bundle))
        self.url = url
        self._release = self._redis.register_script(_RELEASE)

    def claim_many(self, keys: Sequence[str], owner: str, ttl_ms: int) -> list[bool]:
        pipe = self._redis.pipeline(transaction=False)
        for key in keys:
            pipe.set(claim_key(key), owner, nx=True, px=ttl_ms)
        return [bool(held) for held in pipe.execute()]

    def release(self, key: str, owner: str) -> None:
        self._release(keys=[claim_key(key)], args=[owner])

    def get_many(self, keys: Sequence[str]) -> list[Fields | None]:
        if len(keys) == 1:
            try:
                return [_entry(self._redis.hgetall(keys[0]))]
            except redis.exceptions.ResponseError as exc:
                return [_entry(exc)]
        pipe = self._redis.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(key)
        return [_entry(raw) for raw in pipe.execute(raise_on_error=False)]

    def put(self, key: str, fields: Fields, ttl_s: int | None = None) -> None:
        pipe = self._redis.pipeline(transaction=False)
        _write(pipe, key, fields, ttl_s)
        pipe.execute()

    def touch(self, key: str, ttl_s: int) -> None:
        self._redis.expire(key, ttl_s)

    def delete(self, key: str) -> None:
        self._redis.delete(key)

    def exists(self, key: str) -> bool:
        return bool(self._redis.exists(key))

    def close(self) -> None:
        self._redis.close()


class RedisClusterPieceStore:
    """Pieces in a Redis Cluster via redis-py's RedisCluster (slot map, MOVED/ASK).

    Keys carry no hash tag, so the pieces of one file spread over the shards.
    A node that fails is skipped for ``retry_after_s`` (its keys read as
    UNREACHABLE: the agent serves them) while the other shards keep serving;
    after that the next call tries it again, and redis-py refreshes the slot
    map (a restarted master or a promoted replica takes its slots back).
    The RedisCluster client is made on first use: a cluster that no seed node
    answers for is a KV that is down (a ConnectionError, which opens the
    circuit), not an error when opening a reader.
    """

    # RedisClusterException: "cannot be connected" (no node answered a slot map
    # refresh after a failure) and SlotNotCoveredError; it is not a RedisError.
    NODE_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                   redis.exceptions.ClusterDownError, redis.exceptions.RedisClusterException,
                   OSError)

    def __init__(self, urls: Sequence[str], timeout_s: float, retry_after_s: float,
                 ca_bundle: str | None = None) -> None:
        from redis.cluster import ClusterNode

        self._startup_nodes = []
        for url in urls:
            parsed = urlparse(url)
            self._startup_nodes.append(ClusterNode(parsed.hostname or "127.0.0.1",
                                                   parsed.port or 6379))
        # Every node is reached as the first seed's URL says (user, password, TLS):
        # redis-py applies one set of connection options to the whole cluster.
        self._options = connection_options(urls[0], ca_bundle)
        self._timeout_s = timeout_s
        self._client: redis.RedisCluster | None = None
        self._client_lock = threading.Lock()
        self.url = ",".join(urls)
        self.retry_after_s = retry_after_s
        self._dead: dict[str, float] = {}  # node name -> skip until (monotonic)
        self._lock = threading.Lock()

    @property
    def _cluster(self) -> redis.RedisCluster:
        client = self._client
        if client is None:
            with self._client_lock:
                if self._client is None:
                    try:
                        self._client = redis.RedisCluster(
                            startup_nodes=self._startup_nodes, socket_timeout=self._timeout_s,
                            socket_connect_timeout=self._timeout_s,
                            retry=Retry(NoBackoff(), 1), **self._options)
                    except redis.exceptions.RedisClusterException as exc:
                        raise redis.exceptions.ConnectionError(str(exc)) from exc
                client = self._client
        return client

    def _node_of(self, key: str) -> str | None:
        """The name of key's master; None when the slot map has no node for its slot."""
        try:
            return self._cluster.get_node_from_key(key).name
        except redis.exceptions.SlotNotCoveredError:
            return None

    def _alive(self, node: str | None) -> bool:
        if node is None:
            return False
        with self._lock:
            return self._dead.get(node, 0.0) <= time.monotonic()

    def _failed(self, node: str, exc: Exception) -> None:
        with self._lock:
            first = self._dead.get(node, 0.0) <= time.monotonic()
            self._dead[node] = time.monotonic() + self.retry_after_s
        if first:
            log.warning("KV cluster node %s is unreachable (%s: %s): its keys go to the agent; "
                        "trying it again in %.1f s", node, type(exc).__name__, exc,
                        self.retry_after_s)

    def get_many(self, keys: Sequence[str]) -> list[Fields | None]:
        by_node: dict[str | None, list[int]] = {}
        for position, key in enumerate(keys):
            by_node.setdefault(self._node_of(key), []).append(position)
        out: list[Fields | None] = [UNREACHABLE] * len(keys)
        for node, positions in by_node.items():
            if not self._alive(node):
                continue
            try:
                pipe = self._cluster.pipeline()
                for position in positions:
                    pipe.hgetall(keys[position])
                replies = pipe.execute(raise_on_error=False)
            except self.NODE_ERRORS as exc:
                self._failed(node, exc)
                continue
            for position, raw in zip(positions, replies):
                if isinstance(raw, self.NODE_ERRORS):
                    self._failed(node, raw)
                else:
                    out[position] = _entry(raw)
        return out

    def _on_node(self, key: str, call: Any) -> None:
        node = self._node_of(key)
        if not self._alive(node):
            return
        try:
            call()
        except self.NODE_ERRORS as exc:
            self._failed(node, exc)

    shared = True

    def claim_many(self, keys: Sequence[str], owner: str, ttl_ms: int) -> list[bool]:
        """A key whose node is down is ours: nobody can be told to wait for it."""
        held = []
        for key in map(claim_key, keys):
            node = self._node_of(key)
            try:
                held.append(not self._alive(node) or bool(
                    self._cluster.set(key, owner, nx=True, px=ttl_ms)))
            except self.NODE_ERRORS as exc:
                self._failed(node, exc)
                held.append(True)
        return held

    def release(self, key: str, owner: str) -> None:
        key = claim_key(key)
        self._on_node(key, lambda: self._cluster.eval(_RELEASE, 1, key, owner))

    def put(self, key: str, fields: Fields, ttl_s: int | None = None) -> None:
        def write() -> None:
            pipe = self._cluster.pipeline()
            _write(pipe, key, fields, ttl_s)
            pipe.execute()
        self._on_node(key, write)

    def touch(self, key: str, ttl_s: int) -> None:
        self._on_node(key, lambda: self._cluster.expire(key, ttl_s))

    def delete(self, key: str) -> None:
        self._on_node(key, lambda: self._cluster.delete(key))

    def exists(self, key: str) -> bool:
        node = self._node_of(key)
        if not self._alive(node):
            raise NodeDown(node)
        try:
            return bool(self._cluster.exists(key))
        except self.NODE_ERRORS as exc:
            self._failed(node, exc)
            raise NodeDown(node) from None

    def close(self) -> None:
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


def redact(urls: str) -> str:
    """Redis URL(s) without their passwords, for messages."""
    def one(url: str) -> str:
        parsed = urlparse(url)
        if parsed.password is None:
            return url
        return parsed._replace(netloc=parsed.netloc.replace(f":{parsed.password}@", ":***@")).geturl()
    return ",".join(one(url) for url in urls.split(","))


_warned_unreachable = False


def _warn_once_unreachable(name: str, exc: Exception) -> None:
    """A KV that does not answer is silent in the logs by default (fluxon_video
    logs to a NullHandler), yet it means every byte comes from the store:
    say so once per process, as a RuntimeWarning."""
    global _warned_unreachable
    if _warned_unreachable:
        return
    _warned_unreachable = True
    warnings.warn(f"fluxon_video: the KV {name} is unreachable ({type(exc).__name__}): reads "
                  "go to the agent and nothing is cached or shared; check client.redis_url. "
                  "Warned once per process; logging.getLogger('fluxon_video') tells more.",
                  RuntimeWarning, stacklevel=2)


class GuardedPieceStore:
    """Wraps a store so its failures become misses; a circuit skips it for a while.

    After a failure the store is bypassed for ``retry_after_s``; the next call
    after that tries it again (one probe), closing the circuit on success.
    A KV that answers but slower than the origin (the agent or store a miss
    goes to) is no cache: when each of its last reads took longer than both
    ``slow_floor_s`` and the origin's median read, the circuit opens the same
    way, and the first read after ``retry_after_s`` measures it again. (Each
    of several, not a mean: the first reads of a process also connect, a TLS
    handshake per node, and must not make a healthy KV look slow.)
    """

    SAMPLES = 5  # reads remembered, of the KV and of the origin

    KV_ERRORS = (redis.exceptions.RedisError, OSError)
    # Answers from a healthy server (WRONGTYPE, OOM under noeviction, ...): the
    # call failed, Redis is not down. Loading/busy replies are connection errors.
    SERVER_REFUSALS = (redis.exceptions.ResponseError,)

    def __init__(self, store: PieceStore, retry_after_s: float, slow_floor_s: float = 0.05) -> None:
        self.store = store
        self.retry_after_s = retry_after_s
        self.slow_floor_s = slow_floor_s
        self._open_until = 0.0
        self._tripped = False  # the circuit opened and no call has succeeded since
        self._refusals = RateLimited(log)
        # The last reads' durations (seconds), of the KV and of the origin.
        self._kv_s: collections.deque[float] = collections.deque(maxlen=self.SAMPLES)
        self._origin_s: collections.deque[float] = collections.deque(maxlen=self.SAMPLES)
        self._lock = threading.Lock()

    def observe_origin(self, seconds: float) -> None:
        """How long a read from the origin took (what a KV miss costs instead)."""
        with self._lock:
            self._origin_s.append(seconds)

    def _observe_kv(self, seconds: float, probe: bool) -> None:
        """Note a KV read's duration; open the circuit if the KV is slower than the
        origin. The first read after a bypass is judged alone (its connections
        are up): one that is still slow bypasses the KV again at once."""
        with self._lock:
            if probe:  # what was measured before the bypass is stale
                self._kv_s.clear()
            self._kv_s.append(seconds)
            if not probe and len(self._kv_s) < self.SAMPLES:
                return
            kv = min(self._kv_s)
            origin = statistics.median(self._origin_s) if self._origin_s else None
            slow = kv > self.slow_floor_s and (origin is None or kv > origin)
            if slow:
                self._open_until = time.monotonic() + self.retry_after_s
                self._kv_s.clear()
        if slow:
            self._refusals.warning("slow", "the KV %s took %.0f ms or more per read, slower "
                                   "than the origin (%s): reads bypass it; measuring it again "
                                   "in %.1f s", self._name, kv * 1e3,
                                   "no read yet" if origin is None
                                   else f"{origin * 1e3:.0f} ms", self.retry_after_s)

    @property
    def circuit_open(self) -> bool:
        return time.monotonic() < self._open_until

    def _call(self, fn, *args):
        if self.circuit_open:
            return False, None
        try:
            result = fn(*args)
        except NodeDown:
            return False, None
        except self.SERVER_REFUSALS as exc:
            self._refusals.warning("refused", "the KV refused a %s: %s",
                                   getattr(fn, "__name__", "call"), exc)
            return False, None
        except self.KV_ERRORS as exc:
            self._open_until = time.monotonic() + self.retry_after_s
            if not self._tripped:
                self._tripped = True
                log.warning("the KV %s is unreachable (%s: %s): reads go to the agent; "
                            "trying it again in %.1f s", self._name, type(exc).__name__, exc,
                            self.retry_after_s)
                _warn_once_unreachable(self._name, exc)
            return False, None
        if self._tripped:
            self._tripped = False
            log.info("the KV %s answers again: reads use it", self._name)
        return True, result

    @property
    def _name(self) -> str:
        return redact(getattr(self.store, "url", "(in-process)"))

    def get_many(self, keys: Sequence[str]) -> tuple[bool, list[Fields | None]]:
        """(reachable, entries): reachable False means the KV was skipped (failed or
        slow); an entry may be UNREACHABLE when only its node is down."""
        probe = self._open_until > 0
        start = time.perf_counter()
        reachable, entries = self._call(self.store.get_many, keys)
        if not reachable:
            return False, [None] * len(keys)
        self._observe_kv(time.perf_counter() - start, probe)
        if probe and not self.circuit_open:
            self._open_until = 0.0
        return True, entries

    def get(self, key: str) -> tuple[bool, Fields | None]:
        reachable, entries = self.get_many([key])
        if entries[0] is UNREACHABLE:
            return False, None
        return reachable, entries[0]

    def put(self, key: str, fields: Fields, ttl_s: int | None = None) -> bool:
        return self._call(self.store.put, key, fields, ttl_s)[0]

    def touch(self, key: str, ttl_s: int) -> bool:
        return self._call(self.store.touch, key, ttl_s)[0]

    def delete(self, key: str) -> bool:
        return self._call(self.store.delete, key)[0]

    @property
    def shared(self) -> bool:
        return self.store.shared

    def claim_many(self, keys: Sequence[str], owner: str, ttl_ms: int) -> list[bool]:
        """Claims held; a KV that fails grants them all (each process fetches for itself)."""
        reachable, held = self._call(self.store.claim_many, keys, owner, ttl_ms)
        return held if reachable else [True] * len(keys)

    def release(self, key: str, owner: str) -> bool:
        return self._call(self.store.release, key, owner)[0]

    def exists(self, key: str) -> tuple[bool, bool]:
        """(reachable, present)."""
        reachable, present = self._call(self.store.exists, key)
        return reachable, bool(present)

    def close(self) -> None:
        self.store.close()
